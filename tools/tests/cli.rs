//! End to end: the `shoal` binary against shoal processes — `list`, `process list`, `topic info`, typed
//! `topic echo` of the examples' Imu topic (`typed_proto pub`), `topic pub --data` from JSON received by a typed
//! subscriber (`typed_proto sub`), `topic hz/bw`, `config`, `completions`, and bad input of every kind (exit codes,
//! no panic).
//!
//! The examples' `typed_proto` binary is run from the target directory the `shoal` binary is in: `scripts/test`
//! (`cargo test --workspace`) builds it; alone, build it first with `cargo build -p shoal-examples`.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

fn typed_proto() -> PathBuf {
    example("typed_proto")
}

fn example(name: &str) -> PathBuf {
    let p = std::path::Path::new(SHOAL).with_file_name(name);
    assert!(
        p.is_file(),
        "{} is not built: these tests run the examples' typed_proto and typed_fbs; `cargo build -p shoal-examples` \
         (scripts/test builds them)",
        p.display()
    );
    p
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn topic(name: &str) -> String {
    format!("cli_{name}_{}", std::process::id())
}

fn shoal(args: &[&str]) -> Output {
    Command::new(SHOAL).args(args).stdin(Stdio::null()).output().expect("run shoal")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_lines(o: &Output) -> Vec<Value> {
    stdout(o).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"))).collect()
}

fn no_panic(o: &Output) {
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

/// A child killed and reaped on drop.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `typed_proto pub N MS TOPIC`: waits (up to 20 s) for a subscriber, then sends N Imu messages.
fn imu_publisher(topic: &str, n: u32, ms: u32) -> Child {
    Command::new(typed_proto())
        .args(["pub", &n.to_string(), &ms.to_string(), topic])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn typed_proto pub")
}

#[test]
fn list_process_list_and_info_show_a_typed_publisher() {
    let topic = topic("info");
    let publ = Kill(imu_publisher(&topic, 1, 10));
    let pid = publ.0.id();
    // All at once: the publisher waits 20 s for a subscriber, and each listing listens for 2 s.
    let run = |args: &[&str]| Command::new(SHOAL).args(args).stdout(Stdio::piped()).spawn().expect("spawn shoal");
    let list_json = run(&["list", "--json", "--wait-ms", "2000"]);
    let list_text = run(&["list", "--wait-ms", "2000"]);
    let procs = run(&["process", "list", "--json", "--wait-ms", "2000"]);
    let info_json = run(&["topic", "info", &topic, "--json", "--wait-ms", "2000"]);
    let info_text = run(&["topic", "info", &topic, "--wait-ms", "2000"]);
    let topic_list = run(&["topic", "list", "--wait-ms", "2000"]);
    let list = list_json.wait_with_output().expect("list");
    assert!(list.status.success(), "{}", stderr(&list));
    let rows = json_lines(&list);
    let t = rows.iter().find(|v| v["kind"] == "topic" && v["topic"] == topic.as_str()).expect("topic listed");
    assert_eq!(t["types"][0]["type_name"], "pb.Imu", "{t}");
    assert_eq!(t["types"][0]["encoding"], "proto", "{t}");
    assert_eq!((t["publishers"].as_u64(), t["subscribers"].as_u64()), (Some(1), Some(0)), "{t}");
    let p = rows.iter().find(|v| v["kind"] == "process" && v["pid"] == pid).expect("process listed");
    assert_eq!(p["runtime"], "shoal", "{p}");
    assert!(p["publishers"].as_u64() >= Some(1), "{p}");
    // What the process announces of itself: its command line and memory.
    assert!(p["command_line"].as_str().is_some_and(|c| c.ends_with(&format!("pub 1 10 {topic}"))), "{p}");
    assert!(p["memory_rss_bytes"].as_u64().is_some_and(|b| b > 1 << 20), "{p}");

    let text = stdout(&list_text.wait_with_output().expect("list"));
    assert!(text.contains("PROCESSES") && text.contains("TOPIC  ") && text.contains("RATE_HZ"), "{text}");
    assert!(text.lines().any(|l| l.starts_with(&topic) && l.contains("pb.Imu") && l.contains("proto")), "{text}");

    let procs = procs.wait_with_output().expect("process list");
    assert!(json_lines(&procs).iter().any(|v| v["pid"] == pid && v["unit"] == "typed_proto"), "{}", stdout(&procs));

    let info = info_json.wait_with_output().expect("info");
    assert!(info.status.success(), "{}", stderr(&info));
    let ends = json_lines(&info);
    assert_eq!(ends.len(), 1, "{ends:?}");
    let e = &ends[0];
    assert_eq!((e["direction"].as_str(), e["pid"].as_u64()), (Some("pub"), Some(u64::from(pid))), "{e}");
    assert_eq!(e["unit"], "typed_proto");
    assert_eq!(e["descriptor"]["kind"], "file_descriptor_set", "{e}");
    assert_eq!(e["descriptor"]["message"], "pb.Imu", "{e}");
    assert!(e["descriptor"]["fields"].as_array().is_some_and(|f| f.iter().any(|n| n == "linear_acceleration")));
    assert!(!e["layers"].as_array().unwrap().is_empty(), "{e}");

    let text = stdout(&info_text.wait_with_output().expect("info"));
    assert!(text.contains("type        pb.Imu (proto)"), "{text}");
    assert!(text.contains("pb.Imu has 8 field(s)"), "{text}");

    let list = stdout(&topic_list.wait_with_output().expect("topic list"));
    assert!(list.starts_with("DIR  TOPIC"), "{list}");
    assert!(list.lines().any(|l| l.starts_with("pub") && l.contains(&topic) && l.contains("pb.Imu")), "{list}");
}

#[test]
fn typed_echo_decodes_the_examples_imu() {
    let topic = topic("imu");
    // Readable form.
    let echo = Command::new(SHOAL)
        .args(["topic", "echo", &topic, "--count", "2", "--timeout", "30"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn echo");
    let mut publ = Kill(imu_publisher(&topic, 2, 100));
    let out = echo.wait_with_output().expect("echo");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(publ.0.wait().expect("pub").success());
    let text = stdout(&out);
    println!("{text}");
    for want in [
        ", pb.Imu]\nheader:\n  stamp: \"",
        "  frame_id: \"imu_link\"\n  seq: 1\n",
        "  seq: 2\n",
        "linear_acceleration:\n  x: 0.1\n  y: 0.0\n  z: 9.81\n",
        "status: STATUS_DEGRADED (2)\n",
        "status: STATUS_OK (1)\n",
        "covariance: [0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01]\n",
        "attributes:\n  unit: \"m/s2\"\n",
        "temperature_c: 21.0\n",
        "calibration_file: \"cal_2.yaml\"\n",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    // JSON.
    let echo = Command::new(SHOAL)
        .args(["topic", "echo", &topic, "--count", "2", "--json", "--timeout", "30"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn echo");
    let mut publ = Kill(imu_publisher(&topic, 2, 100));
    let out = echo.wait_with_output().expect("echo");
    assert!(publ.0.wait().expect("pub").success());
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2);
    for (i, v) in lines.iter().enumerate() {
        assert_eq!((v["type_name"].as_str(), v["encoding"].as_str()), (Some("pb.Imu"), Some("proto")), "{v}");
        let m = &v["message"];
        assert_eq!(m["header"]["seq"], i as u64 + 1, "{v}");
        assert_eq!(m["header"]["frame_id"], "imu_link", "{v}");
        assert_eq!(m["attributes"]["unit"], "m/s2", "{v}");
        assert!(v.get("decode_error").is_none(), "{v}");
    }
    assert_eq!(lines[1]["message"]["status"], "STATUS_OK");
}

#[test]
fn flatbuffers_payloads_show_their_structure() {
    let topic = topic("fbs");
    let echo = Command::new(SHOAL)
        .args(["topic", "echo", &topic, "--count", "2", "--json", "--timeout", "30"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn echo");
    let mut publ = Kill(
        Command::new(example("typed_fbs"))
            .args(["pub", "2", "100", &topic])
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn typed_fbs pub"),
    );
    let out = echo.wait_with_output().expect("echo");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(publ.0.wait().expect("pub").success());
    for (i, v) in json_lines(&out).iter().enumerate() {
        assert_eq!((v["type_name"].as_str(), v["encoding"].as_str()), (Some("demo.Pose"), Some("flatb")), "{v}");
        let fields = v["flatbuffers"]["fields"].as_array().expect("root table fields");
        let slot = |n: u64| fields.iter().find(|f| f["slot"] == n).unwrap_or_else(|| panic!("slot {n}: {v}"));
        assert_eq!(slot(0)["value_le"], i as u64 + 1, "seq: {v}");
        assert_eq!(slot(1)["string"], "map", "frame_id: {v}");
        assert_eq!(slot(3)["as_float"], 0.25, "heading_rad: {v}");
        assert!(v["payload_hex"].is_string(), "{v}");
    }
}

/// `typed_proto sub N TOPIC`, ready once it printed its first line.
fn imu_subscriber(topic: &str, n: u32) -> Child {
    Command::new(typed_proto())
        .args(["sub", &n.to_string(), topic])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn typed_proto sub")
}

#[test]
fn pub_from_json_reaches_a_typed_subscriber() {
    let data = r#"{"header": {"seq": 41, "frame_id": "from_cli"}, "linear_acceleration": {"z": 9.5},
                   "status": "STATUS_OK", "attributes": {"unit": "cli"}, "temperature_c": 19.5}"#;
    // The descriptor from registration (the typed subscriber announces it), then from --proto.
    for proto in [None, Some(repo().join("examples/proto/imu.proto"))] {
        let topic = topic(if proto.is_some() { "pubproto" } else { "pubjson" });
        let sub = imu_subscriber(&topic, 2);
        let mut args: Vec<String> =
            ["topic", "pub", &topic, "--type", "pb.Imu", "--data", data].iter().map(|s| s.to_string()).collect();
        args.extend(["--count", "2", "--rate", "20", "--wait-timeout", "20"].map(String::from));
        if let Some(p) = &proto {
            args.extend(["--proto".to_string(), p.display().to_string()]);
        }
        let publ = Command::new(SHOAL).args(&args).output().expect("pub");
        assert!(publ.status.success(), "{}", stderr(&publ));
        let out = sub.wait_with_output().expect("sub");
        let text = stdout(&out);
        assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
        let got: Vec<&str> = text.lines().filter(|l| l.starts_with("got ")).collect();
        assert_eq!(got.len(), 2, "{text}");
        for g in got {
            assert!(g.contains("seq=41 frame=from_cli") && g.contains("acc_z=9.5"), "{g}");
            assert!(g.contains("status=STATUS_OK") && g.contains("unit=cli") && g.contains("calib=temp:19.5"), "{g}");
        }
    }
}

#[test]
fn hz_and_bw_report_rolling_windows() {
    let topic = topic("hz");
    let payload = "x".repeat(1000);
    let _publ = Kill(
        Command::new(SHOAL)
            .args(["topic", "pub", &topic, &payload, "--count", "400", "--rate", "50", "--wait-subs", "2"])
            .args(["--wait-timeout", "20", "--settle-ms", "0"])
            .stdout(Stdio::null())
            .spawn()
            .expect("pub"),
    );
    let hz = Command::new(SHOAL)
        .args(["topic", "hz", &topic, "--duration", "5", "--json", "--window", "100"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("hz");
    let bw = Command::new(SHOAL)
        .args(["topic", "bw", &topic, "--duration", "5", "--json", "--window", "100"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("bw");
    let hz = hz.wait_with_output().expect("hz");
    let bw = bw.wait_with_output().expect("bw");
    assert!(hz.status.success() && bw.status.success(), "{} {}", stderr(&hz), stderr(&bw));
    let last = json_lines(&hz).pop().expect("an hz report");
    let rate = last["rate_hz"].as_f64().unwrap_or(0.0);
    // 50 Hz paced by sleeps, timed at arrival on a loaded machine: a wide band, but not 0 and not another rate.
    assert!((30.0..=70.0).contains(&rate), "{last}");
    assert!(last["min_s"].as_f64() <= last["max_s"].as_f64(), "{last}");
    assert!(last["window"].as_u64().is_some_and(|w| (2..=100).contains(&w)), "{last}");
    assert_eq!(last["drops"], 0, "{last}");
    let last = json_lines(&bw).pop().expect("a bw report");
    assert_eq!((last["mean_size"].as_f64(), last["min_size"].as_u64()), (Some(1000.0), Some(1000)), "{last}");
    let bps = last["bandwidth_bps"].as_f64().unwrap_or(0.0);
    assert!((30_000.0..=70_000.0).contains(&bps), "{last}");
}

#[test]
fn bad_input_is_an_error_with_a_meaningful_exit_code_never_a_panic() {
    let t = topic("bad");
    let proto = repo().join("examples/proto/imu.proto");
    let proto = proto.to_str().unwrap();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["topic", "pub", &t, "--type", "pb.Imu", "--data", "{", "--proto", proto], 2, "not a valid `pb.Imu`"),
        (vec!["topic", "pub", &t, "--type", "pb.Imu", "--data", r#"{"nope": 1}"#, "--proto", proto], 2, "nope"),
        (vec!["topic", "pub", &t, "--data", "{}"], 2, "--data needs --type"),
        (vec!["topic", "pub", &t, "--type", "pb.Nope", "--data", "{}", "--proto", proto], 2, "defines: pb.Header"),
        (
            vec!["topic", "pub", &t, "--type", "x.Y", "--data", "{}", "--proto", "/nonexistent.proto"],
            2,
            "cannot compile",
        ),
        (vec!["topic", "pub", &t, "--type", "no.Such", "--data", "{}", "--type-wait-ms", "300"], 3, "--proto FILE"),
        (vec!["topic", "pub", &t, "x", "--rate=-1"], 2, "--rate"),
        (vec!["topic", "pub", &t], 2, "give the message"),
        (vec!["topic", "echo", &t, "--timeout", "0.5"], 3, "no message on"),
        (vec!["topic", "echo", &t, "--timeout=-1"], 2, "--timeout"),
        (vec!["topic", "hz", &t, "--window", "0"], 2, "--window"),
        (vec!["topic", "hz", &t, "--duration", "1", "--timeout", "0.3"], 3, "no message on"),
        (vec!["topic", "info", &t, "--wait-ms", "300"], 3, "shoal topic list"),
        (vec!["topic", "bogus"], 2, "unrecognized subcommand"),
        (vec!["completions", "tcsh"], 2, "invalid value"),
        (vec!["config", "check", "/nonexistent/ecal.ini"], 4, "cannot read"),
    ];
    for (args, code, says) in cases {
        let o = shoal(&args);
        no_panic(&o);
        assert_eq!(o.status.code(), Some(code), "shoal {args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "shoal {args:?} should say {says:?}: {}", stderr(&o));
    }
}

#[test]
fn a_payload_that_does_not_decode_is_shown_in_hex_with_a_note() {
    let topic = topic("undecodable");
    // Announced as protobuf but without a descriptor, and not protobuf bytes anyway.
    let echo = Command::new(SHOAL)
        .args(["topic", "echo", &topic, "--count", "1", "--json", "--timeout", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("echo");
    let st =
        shoal(&["topic", "pub", &topic, "\u{1}zz", "--type", "pb.Imu", "--encoding", "proto", "--wait-timeout", "10"]);
    assert!(st.status.success(), "{}", stderr(&st));
    let out = echo.wait_with_output().expect("echo");
    no_panic(&out);
    let v = &json_lines(&out)[0];
    assert_eq!(v["payload_hex"], "017a7a", "{v}");
    assert!(v["decode_error"].as_str().is_some_and(|e| e.contains("carries no descriptor")), "{v}");
    // Readable: the note on stderr, the bytes in hex.
    let echo = Command::new(SHOAL)
        .args(["topic", "echo", &topic, "--count", "1", "--timeout", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("echo");
    let st =
        shoal(&["topic", "pub", &topic, "\u{1}zz", "--type", "pb.Imu", "--encoding", "proto", "--wait-timeout", "10"]);
    assert!(st.status.success());
    let out = echo.wait_with_output().expect("echo");
    assert!(stdout(&out).contains("(not decoded) 0x017a7a"), "{}", stdout(&out));
    assert!(stderr(&out).contains("note: protobuf type `pb.Imu` carries no descriptor"), "{}", stderr(&out));
}

fn write_tmp(name: &str, text: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}_{}.ini", std::process::id()));
    std::fs::write(&p, text).expect("write ini");
    p
}

#[test]
fn config_generate_check_and_show() {
    let generated = shoal(&["config", "generate"]);
    assert!(generated.status.success());
    let committed = std::fs::read_to_string(repo().join("etc/ecal.ini")).expect("etc/ecal.ini");
    assert_eq!(stdout(&generated), committed, "`shoal config generate` is etc/ecal.ini");

    let bad = write_tmp("bad", "[common]\nregistration_refresh = 0\n\n[network]\nmulticast_ttl = 300\n");
    let o = shoal(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let err = stderr(&o);
    let name = bad.display().to_string();
    assert!(err.contains(&format!("{name}:2: [common] registration_refresh = \"0\": allowed 1..=3600000")), "{err}");
    assert!(err.contains(&format!("{name}:5: [network] multicast_ttl = \"300\": allowed 0..=255")), "{err}");
    assert!(err.contains("2 error(s)"), "{err}");
    let o = shoal(&["config", "check", bad.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(4));
    let lines = json_lines(&o);
    assert_eq!(
        (lines[0]["line"].as_u64(), lines[0]["allowed"].as_str()),
        (Some(2), Some("1..=3600000 (milliseconds)"))
    );
    assert_eq!(lines[2]["kind"], "summary");

    let good = write_tmp("good", "[common]\nregistration_refresh = 500\n[nonsense]\nx = 1\n");
    let o = shoal(&["config", "check", good.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("section [nonsense] is not used by shoal"), "{}", stdout(&o));
    assert!(shoal(&["config", "check", &repo().join("etc/ecal.ini").display().to_string()]).status.success());

    let show = Command::new(SHOAL).args(["config", "show"]).env("ECAL_INI", &good).output().expect("show");
    assert!(show.status.success(), "{}", stderr(&show));
    let text = stdout(&show);
    assert!(text.contains("(named by $ECAL_INI)"), "{text}");
    let row = text.lines().find(|l| l.contains("registration_refresh")).unwrap_or_default();
    assert!(row.contains("500") && row.ends_with(&format!("{}:2", good.display())), "{row}");
    let row = text.lines().find(|l| l.contains("registration_timeout")).unwrap_or_default();
    assert!(row.contains("10000") && row.ends_with("default"), "{row}");

    let show = Command::new(SHOAL).args(["config", "show", "--json"]).env("ECAL_INI", &good).output().expect("show");
    let lines = json_lines(&show);
    assert_eq!(lines[0]["found_by"], "environment ($ECAL_INI)");
    let refresh = lines.iter().find(|v| v["key"] == "registration_refresh").expect("key");
    assert_eq!((refresh["value"].as_str(), refresh["line"].as_u64()), (Some("500"), Some(2)), "{refresh}");
    // A bad $ECAL_INI: every command that starts a node says so with exit code 4.
    let o = Command::new(SHOAL).args(["topic", "list", "--wait-ms", "0"]).env("ECAL_INI", &bad).output().unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains(":2: [common] registration_refresh"), "{}", stderr(&o));
    let o = Command::new(SHOAL).args(["config", "show"]).env("ECAL_INI", &bad).output().unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
}

#[test]
fn completions_for_bash_zsh_fish() {
    for (shell, marker) in [("bash", "complete -F"), ("zsh", "#compdef shoal"), ("fish", "complete -c shoal")] {
        let o = shoal(&["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let s = stdout(&o);
        assert!(s.contains(marker) && s.contains("echo") && s.contains("hz"), "{shell}: {s}");
    }
    let help = stdout(&shoal(&["--help"]));
    assert!(help.contains("Exit codes:") && help.contains("3  not found"), "{help}");
}

#[test]
fn echo_output_ends_cleanly_when_its_reader_goes_away() {
    let topic = topic("pipe");
    let start = Instant::now();
    let mut echo = Command::new(SHOAL)
        .args(["topic", "echo", &topic, "--timeout", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("echo");
    drop(echo.stdout.take());
    let st = shoal(&["topic", "pub", &topic, "hello", "--count", "5", "--rate", "50", "--wait-timeout", "10"]);
    assert!(st.status.success());
    let out = echo.wait_with_output().expect("echo");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(20));
}
