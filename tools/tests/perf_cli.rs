//! End-to-end runs of `shoal perf` (two processes each).

use std::process::{Command, Stdio};

fn perf(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal")).arg("perf").args(args).output().expect("run shoal");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}"))).collect()
}

/// The iceoryx2 program scripts/iceoryx2 builds, where `shoal perf` finds it by default (beside target/debug).
fn iceoryx2_built() -> bool {
    std::path::Path::new(env!("CARGO_BIN_EXE_shoal"))
        .parent()
        .and_then(std::path::Path::parent)
        .is_some_and(|t| t.join("iceoryx2-bench/bin/shoal-iceoryx2-bench").is_file())
}

/// The plain rings of `--baseline`: per ring (line, warm, deep) every mode, wait and size; iceoryx2's ping-pong too
/// where scripts/iceoryx2 built it (the run then measures it in the same invocation).
#[test]
fn baseline_only_json_covers_every_ring_mode_wait_and_size() {
    let (ok, out, err) = perf(&[
        "--baseline-only",
        "--json",
        "--sizes",
        "64,4k",
        "--iterations",
        "300",
        "--count",
        "2000",
        "--pingpong",
        "--throughput",
        "--zero-copy",
    ]);
    assert!(ok, "stderr: {err}");
    let lines = json_lines(&out);
    let ice = if iceoryx2_built() { 2 * 2 } else { 0 };
    // Per ring, wait and size: pingpong, zero_copy, throughput, throughput_paced; iceoryx2: pingpong per wait and size.
    assert_eq!(lines.len(), 3 * 2 * 4 * 2 + ice, "{out}");
    for v in &lines {
        assert_eq!(v["system"], "baseline");
        assert!(v["p50_ns"].as_u64().unwrap() > 0);
        assert!(v["p50_ns"].as_u64() <= v["p99_ns"].as_u64());
        assert!(v["msgs_per_s"].as_f64().unwrap() > 0.0);
        assert!(v["peer_peak_rss_kb"].as_u64().unwrap() > 0);
        if v["transport"] == "iceoryx2" {
            assert_eq!((v["mode"].as_str(), v["messages"].as_u64()), (Some("pingpong"), Some(300)), "{v}");
            continue;
        }
        assert!(["line_ring", "warm_ring", "baseline_ring"].contains(&v["transport"].as_str().unwrap()), "{v}");
        if v["mode"] == "throughput_paced" {
            // Paced at half the unpaced rate the same ring measured just before for the same wait and size.
            let unpaced = lines
                .iter()
                .find(|u| {
                    u["mode"] == "throughput"
                        && u["transport"] == v["transport"]
                        && u["wait"] == v["wait"]
                        && u["size_bytes"] == v["size_bytes"]
                })
                .expect("unpaced row");
            let target = v["rate_target"].as_f64().unwrap();
            assert!((target - unpaced["msgs_per_s"].as_f64().unwrap() / 2.0).abs() < 1e-6, "{v}");
            assert_eq!(v["lost"], 0, "{v}");
            assert_eq!(v["messages"], 2000);
        } else if v["mode"] == "throughput" {
            assert_eq!(v["lost"], 0, "the plain rings apply back-pressure: {v}");
            assert!(v.get("rate_target").is_none());
        } else {
            assert_eq!(v["messages"], 300);
        }
    }
    let modes: Vec<_> = lines.iter().map(|v| (v["wait"].as_str().unwrap(), v["mode"].as_str().unwrap())).collect();
    assert!(modes.contains(&("spin", "zero_copy")) && modes.contains(&("block", "throughput")));
    for ring in ["line_ring", "warm_ring", "baseline_ring"] {
        assert_eq!(lines.iter().filter(|v| v["transport"] == ring).count(), 16, "{ring}: {out}");
    }
}

#[test]
fn bad_arguments_say_what_to_do() {
    let (ok, _, err) = perf(&["--sizes", "8"]);
    assert!(!ok);
    assert!(err.contains("too small") && err.contains(">= 16"), "{err}");
    let (ok, _, err) = perf(&["--sizes", "12x"]);
    assert!(!ok);
    assert!(err.contains("k or m suffix"), "{err}");
}

/// A block-mode ping-pong warms up for at least 250 ms (rounds of twice as many round trips until then) unless
/// `--iterations` is given: after a pause the kernel may have put both processes on one CPU, which the first
/// hundred milliseconds or so of wake-ups undo. Spin mode, and explicit iterations, warm up by the count rule.
#[test]
fn block_pingpongs_warm_up_for_a_quarter_second_unless_iterations_are_given() {
    let warmed = |args: &[&str], wait: &str| {
        let (ok, out, err) = perf(args);
        assert!(ok, "stderr: {err}");
        json_lines(&out)
            .iter()
            .find(|v| v["wait"] == wait && v["mode"] == "pingpong")
            .and_then(|v| v["warmup_round_trips"].as_f64())
            .map(|n| n as u64)
            .unwrap_or_else(|| panic!("a {wait} ping-pong row with warmup_round_trips: {out}"))
    };
    // The count rule: a tenth of the round trips (4,096 at 64 KiB), 10 to 1,000.
    assert_eq!(warmed(&["--json", "--pingpong", "--wait", "spin", "--sizes", "64k"], "spin"), 409);
    // 409 round trips of 64 KiB take a few ms; then 818, 1,636, ... more until 250 ms have passed.
    let block = warmed(&["--json", "--pingpong", "--wait", "block", "--sizes", "64k"], "block");
    assert!(block >= 409 + 818, "block mode warmed up with {block} round trips");
    let args = ["--json", "--pingpong", "--wait", "block", "--sizes", "64k", "--iterations", "50"];
    assert_eq!(warmed(&args, "block"), 10);
}

/// Every shoal row's ratios are taken against the strongest plain ring of the same run (for latency the fastest of the
/// line, warm and deep rings, named in `ratio_vs`); the deep ring and (where built) iceoryx2 give second ratios.
#[test]
fn shoal_rows_carry_their_ratio_to_the_strongest_ring_of_the_same_run() {
    let (ok, out, err) =
        perf(&["--baseline", "--json", "--wait", "block", "--sizes", "64,64k", "--iterations", "100", "--pingpong"]);
    assert!(ok, "stderr: {err}");
    let (checks, lines): (Vec<_>, Vec<_>) = json_lines(&out).into_iter().partition(|v| v["mode"] == "host_check");
    let ice = iceoryx2_built();
    assert_eq!(lines.len(), 2 * if ice { 5 } else { 4 }, "shoal, three rings (and iceoryx2) at two sizes: {out}");
    // The host checks, one per size: the line ring's 64 B spin ping-pong right before the size's references and right
    // after shoal's (block mode: no row of its own among them).
    assert_eq!(checks.len(), 2, "{out}");
    for (c, size) in checks.iter().zip([64, 65536]) {
        assert_eq!(c["for_size_bytes"], size, "{c}");
        assert!(c["before_p50_ns"].as_u64() > Some(0) && c["after_p50_ns"].as_u64() > Some(0), "{c}");
        assert!(c["steady"].is_boolean() && c.get("start_p50_ns").is_none(), "{c}");
    }
    // Size by size: every row of 64 B (the references', then shoal's) comes before any of 64 KiB.
    let sizes: Vec<u64> = lines.iter().map(|v| v["size_bytes"].as_u64().unwrap()).collect();
    assert!(sizes.is_sorted(), "the references and shoal are measured size by size: {sizes:?}");
    assert_eq!(lines[lines.len() / 2 - 1]["system"], "shoal", "{out}");
    for size in [64, 65536] {
        let row = |transport: &str| {
            lines
                .iter()
                .find(|v| v["transport"] == transport && v["size_bytes"] == size)
                .unwrap_or_else(|| panic!("a {transport} row at {size} B: {out}"))
        };
        let shoal = row("shm_ring");
        assert_eq!((shoal["system"].as_str(), shoal["mode"].as_str()), (Some("shoal"), Some("pingpong")));
        let (line, warm, deep) = (row("line_ring"), row("warm_ring"), row("baseline_ring"));
        let p50 = |v: &serde_json::Value| v["p50_ns"].as_f64().unwrap();
        let strongest = [line, warm, deep].into_iter().min_by(|a, b| p50(a).total_cmp(&p50(b))).unwrap();
        assert_eq!(shoal["ratio_vs"], strongest["transport"], "the faster plain ring is the reference: {shoal}");
        let close = |k: &str, expect: f64| {
            assert!((shoal[k].as_f64().unwrap() - expect).abs() < 1e-9, "{k} != {expect}: {shoal}");
        };
        close("p50_ratio", p50(shoal) / p50(strongest));
        close("deep_p50_ratio", p50(shoal) / p50(deep));
        assert!(shoal["msgs_per_s_ratio"].as_f64().unwrap() > 0.0, "{shoal}");
        for base in [line, warm, deep] {
            assert_eq!(base["system"], "baseline");
            assert!(base.get("p50_ratio").is_none(), "{base}");
        }
        if ice {
            let i = row("iceoryx2");
            assert!(p50(i) > 0.0 && p50(i) <= i["p99_ns"].as_f64().unwrap(), "{i}");
            close("iceoryx2_p50_ratio", p50(shoal) / p50(i));
        } else {
            assert!(shoal.get("iceoryx2_p50_ratio").is_none(), "{shoal}");
        }
    }
    // The table ends with the summary naming the reference.
    let (ok, out, err) = perf(&["--baseline", "--wait", "spin", "--sizes", "64", "--iterations", "100", "--pingpong"]);
    assert!(ok, "stderr: {err}");
    assert!(out.contains("vs line_ring:") || out.contains("vs warm_ring:"), "{out}");
    assert!(out.contains("vs deep ring: p50"), "{out}");
    assert!(out.contains("shoal against the strongest plain ring of this run"), "{out}");
    assert!(out.contains("-- host check (spin, 64B): the line ring's 64 B spin p50 "), "{out}");
    assert!(out.contains(" in them, "), "spin mode has the line ring's own 64 B row: {out}");
}

/// `--iceoryx2 DIR` asks for the iceoryx2 reference: a directory without the program is an error that says how to
/// build it; without --baseline the flag has nothing to add to.
#[test]
fn iceoryx2_reference_says_how_to_build_it() {
    let (ok, _, err) = perf(&["--baseline", "--iceoryx2", "/nonexistent/ice", "--sizes", "64", "--pingpong"]);
    assert!(!ok && err.contains("scripts/iceoryx2") && err.contains("/nonexistent/ice"), "{err}");
    let (ok, _, err) = perf(&["--iceoryx2", "/nonexistent/ice"]);
    assert!(!ok && err.contains("--baseline"), "{err}");
}

#[test]
fn fanout_reports_cpu_cost_per_send_against_one_subscriber() {
    let (ok, out, err) = perf(&["--subscribers", "2", "--json", "--wait", "block", "--sizes", "64", "--count", "300"]);
    assert!(ok, "stderr: {err}");
    let lines = json_lines(&out);
    let fanout: Vec<_> = lines.iter().filter(|v| v["mode"] == "fanout").collect();
    assert_eq!(fanout.len(), 2, "{out}");
    assert_eq!((fanout[0]["subscribers"].as_u64(), fanout[1]["subscribers"].as_u64()), (Some(1), Some(2)));
    for v in &fanout {
        assert!(v["send_cpu_ns"].as_f64().unwrap() > 0.0, "{v}");
        assert!(v["send_wall_ns"].as_f64().unwrap() > 0.0, "{v}");
    }
    // The ratio compared is the median of the ABBA blocks' ratios of phase means (unit tests of `block_ratio`); the
    // counts' median phase means set against each other are reported beside it.
    let ratio = fanout[1]["send_cpu_ratio_vs_1"].as_f64().unwrap();
    assert!(ratio.is_finite() && ratio > 0.0, "{ratio}");
    let medians = fanout[1]["send_cpu_medians_ratio_vs_1"].as_f64().unwrap();
    let expect = fanout[1]["send_cpu_ns"].as_f64().unwrap() / fanout[0]["send_cpu_ns"].as_f64().unwrap();
    assert!((medians - expect).abs() < 1e-9, "{medians} {expect}");
}

/// `--transport udp|tcp --baseline`: shoal's rows are labelled with the layer the receivers saw every message come
/// through, the raw socket program's rows `raw_udp` / `raw_tcp`, and every shoal row has its ratio to the raw row
/// of the same mode and size.
#[test]
fn network_transports_label_their_rows_and_compare_with_raw_sockets() {
    for (transport, raw) in [("udp", "raw_udp"), ("tcp", "raw_tcp")] {
        let (ok, out, err) = perf(&[
            "--transport",
            transport,
            "--baseline",
            "--json",
            "--wait",
            "block",
            "--sizes",
            "64,100k",
            "--iterations",
            "100",
            "--count",
            "300",
            "--rate",
            "2000",
            "--pingpong",
            "--throughput",
        ]);
        assert!(ok, "{transport}: stderr: {err}");
        let lines = json_lines(&out);
        // Per system and size: throughput, throughput_paced, pingpong.
        assert_eq!(lines.len(), 2 * 2 * 3, "{transport}: {out}");
        for v in &lines {
            let size = v["size_bytes"].as_u64().unwrap();
            if v["system"] == "shoal" {
                assert_eq!(v["transport"], transport, "{v}");
                let received = match v["mode"].as_str() {
                    // Both directions: 10% warm-up (at least 10) + 100 measured round trips.
                    Some("pingpong") => 2 * 110,
                    _ => v["messages"].as_u64().unwrap() - v["lost"].as_u64().unwrap(),
                };
                assert_eq!(v["via"], serde_json::json!({ transport: received }), "{v}");
                let base = lines
                    .iter()
                    .find(|b| b["system"] == "baseline" && b["mode"] == v["mode"] && b["size_bytes"] == size)
                    .expect("a raw row of the same mode and size");
                let expect = v["msgs_per_s"].as_f64().unwrap() / base["msgs_per_s"].as_f64().unwrap();
                assert!((v["msgs_per_s_ratio"].as_f64().unwrap() - expect).abs() < 1e-9, "{v}");
            } else {
                assert_eq!(v["transport"], raw, "{v}");
                assert!(v.get("via").is_none(), "{v}");
            }
            if v["mode"] == "throughput_paced" || transport == "tcp" {
                // 2000 msg/s is far below what either carries; TCP loses nothing at any rate.
                assert_eq!(v["lost"].as_u64().unwrap_or(0), 0, "{v}");
            }
        }
    }
    let (ok, _, err) = perf(&["--transport", "udp", "--zero-copy"]);
    assert!(!ok && err.contains("--zero-copy"), "{err}");
}

/// `shoal perf --service`: a row per size and client count (shoal client -> shoal server in another process), every
/// call answered, and the verdict line; without `--against ecal` nothing is compared with eCAL.
#[test]
fn service_calls_are_measured_and_every_call_is_answered() {
    let (ok, out, err) = perf(&["--service", "--json", "--sizes", "64,1m", "--clients", "2", "--iterations", "40"]);
    assert!(ok, "stderr: {err}");
    let lines = json_lines(&out);
    let rows: Vec<_> = lines.iter().filter(|v| v["mode"] == "service").collect();
    assert_eq!(rows.len(), 4, "two sizes, one and two clients: {out}");
    for (v, (size, clients)) in rows.iter().zip([(64, 1), (64, 2), (1 << 20, 1), (1 << 20, 2)]) {
        assert_eq!((v["client"].as_str(), v["server"].as_str()), (Some("shoal"), Some("shoal")), "{v}");
        assert_eq!((v["size_bytes"].as_u64(), v["clients"].as_u64()), (Some(size), Some(clients)), "{v}");
        assert_eq!(v["latency"], "round_trip", "{v}");
        // 40 calls per size and client count, shared by the clients.
        assert_eq!(v["calls"], 40, "{v}");
        assert_eq!(v["answered"], 40, "{v}");
        assert_eq!((v["failed"].as_u64(), v["timed_out"].as_u64()), (Some(0), Some(0)), "{v}");
        assert!(v["p50_ns"].as_u64().unwrap() > 0 && v["p50_ns"].as_u64() <= v["p99_ns"].as_u64(), "{v}");
        assert!(v["calls_per_s"].as_f64().unwrap() > 0.0, "{v}");
        assert!(v["server_peak_rss_kb"].as_u64().unwrap() > 0, "{v}");
        assert!(v.get("p50_ratio").is_none(), "no eCAL pair to compare with: {v}");
    }
    let goal = lines.iter().find(|v| v["mode"] == "service_goal").expect("the verdict line");
    assert_eq!(goal["calls_not_answered"], 0, "{goal}");
    assert_eq!(goal["calls_1m_answered"], 80, "{goal}");
    assert_eq!(goal["no_loss_at_1m"], true, "{goal}");
    assert_eq!(goal["p50_goal_met"], serde_json::Value::Null, "not measured without --against ecal: {goal}");
}

/// Calls that are not answered are counted and reported, and the run fails: here the server may send no response
/// over 1 KiB (`[shoal_service] max_response`), so every 2 KiB call fails.
#[test]
fn service_calls_not_answered_fail_the_run() {
    let ini = format!("{}/perf_service_{}.ini", env!("CARGO_TARGET_TMPDIR"), std::process::id());
    std::fs::write(&ini, "[shoal_service]\nmax_response = 1k\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["perf", "--service", "--json", "--sizes", "2k", "--clients", "1", "--iterations", "20"])
        .env("ECAL_INI", &ini)
        .output()
        .expect("run shoal");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{stdout}");
    assert!(stderr.contains("calls were not answered"), "{stderr}");
    let lines = json_lines(&stdout);
    let row = lines.iter().find(|v| v["mode"] == "service").expect("the row is printed");
    assert!(row["failed"].as_u64().unwrap() >= 10, "{row}");
    assert_eq!(row["answered"], 0, "{row}");
    assert!(row["error"].as_str().unwrap().contains("Failed"), "{row}");
}

/// The eCAL C++ programs of `bench/ecal-cpp/`, built by `scripts/ecal-cpp` on first use (idempotent; it needs g++,
/// and eCAL 6.1.1's headers, downloaded once, and the eCAL venv the interop tests use): the directory it prints last.
/// `None` (the reason printed as SKIPPED) only when the headers cannot be downloaded (the script's status 3: no
/// `ECAL_HEADERS_FROM` and GitHub out of reach); any other failure fails the test.
fn ecal_cpp_dir() -> Option<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/ecal-cpp");
    let out = Command::new("bash").arg(script).stdin(Stdio::null()).output().expect("run scripts/ecal-cpp");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.code() == Some(3) {
        // Straight to the process's stderr, past libtest's capture: the skip shows in a passing run's log.
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIPPED: the eCAL C++ reference needs eCAL 6.1.1's headers:\n{stderr}");
        return None;
    }
    assert!(
        out.status.success(),
        "scripts/ecal-cpp failed ({}): the eCAL C++ reference is not available:\n{stderr}",
        out.status
    );
    Some(stdout.lines().last().unwrap_or_default().trim().to_string())
}

/// `--pingpong --against ecal`: eCAL 6.1.1's C++ publish/subscribe ping-pong (its shared-memory layer, block mode)
/// runs in the same invocation after shoal's block-mode ping-pong, for the same sizes, as `ecal-cpp/shm` rows; shoal's
/// block-mode rows carry their ratios to it (JSON) and the table follows each eCAL row with shoal's p50 over eCAL's.
#[test]
fn pingpong_against_ecal_measures_ecal_cpp_in_the_same_run() {
    let Some(dir) = ecal_cpp_dir() else { return };
    let common = ["--pingpong", "--against", "ecal", "--ecal-cpp", &dir, "--sizes", "64,1m", "--iterations", "50"];
    let (ok, out, err) = perf(&[&common[..], &["--wait", "block", "--json"]].concat());
    assert!(ok, "stderr: {err}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 4, "shoal and eCAL at two sizes: {out}");
    let p = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    for (i, size) in [64u64, 1 << 20].into_iter().enumerate() {
        // shoal's rows first, then eCAL's, which ran after them.
        let (shoal, ecal) = (&lines[i], &lines[2 + i]);
        assert_eq!(
            (shoal["system"].as_str(), shoal["transport"].as_str()),
            (Some("shoal"), Some("shm_ring")),
            "{shoal}"
        );
        assert_eq!((ecal["system"].as_str(), ecal["transport"].as_str()), (Some("ecal-cpp"), Some("shm")), "{ecal}");
        for v in [shoal, ecal] {
            assert_eq!((v["mode"].as_str(), v["wait"].as_str()), (Some("pingpong"), Some("block")), "{v}");
            assert_eq!((p(v, "size_bytes"), p(v, "messages")), (size, 50), "{v}");
            assert!(p(v, "p50_ns") > 0 && p(v, "p50_ns") <= p(v, "p99_ns") && p(v, "p99_ns") <= p(v, "max_ns"), "{v}");
            assert!(v["msgs_per_s"].as_f64().unwrap() > 0.0 && p(v, "peer_peak_rss_kb") > 0, "{v}");
        }
        assert!(ecal.get("ecal_p50_ratio").is_none() && ecal.get("p50_ratio").is_none(), "{ecal}");
        let ratio = shoal["ecal_p50_ratio"].as_f64().unwrap_or_else(|| panic!("ecal_p50_ratio in {shoal}"));
        let expect = p(shoal, "p50_ns") as f64 / p(ecal, "p50_ns") as f64;
        assert!((ratio - expect).abs() < 1e-9, "{ratio} != {expect}: {shoal}");
        assert!(shoal["ecal_p99_ratio"].as_f64().is_some(), "{shoal}");
    }
    // The table, spin and block: eCAL runs once, after shoal's block mode, each row followed by the ratio.
    let (ok, out, err) = perf(&common);
    assert!(ok, "stderr: {err}");
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("ecal-cpp/shm")).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows.iter().all(|r| r.contains(" block ") && r.contains("pingpong")), "{out}");
    assert_eq!(out.matches("shoal block p50 / eCAL C++ p50: ").count(), 2, "{out}");
    let block_shoal = out.find("shoal/shm_ring         block").expect("shoal's block rows");
    assert!(out.find("ecal-cpp/shm").unwrap() > block_shoal, "eCAL after shoal's block mode: {out}");
}

#[test]
fn service_and_against_arguments_say_what_to_do() {
    let (ok, _, err) = perf(&["--service", "--pingpong"]);
    assert!(!ok && err.contains("--pingpong") && err.contains("--service"), "{err}");
    let (ok, _, err) = perf(&["--service", "--against", "ecal", "--ecal-cpp", "/nonexistent/shoal-ecal"]);
    assert!(!ok && err.contains("scripts/ecal-cpp") && err.contains("/nonexistent/shoal-ecal"), "{err}");
    let (ok, _, err) = perf(&["--against", "ecal"]);
    assert!(!ok && err.contains("--service") && err.contains("--pingpong"), "{err}");
    let (ok, _, err) = perf(&["--throughput", "--against", "ecal"]);
    assert!(!ok && err.contains("--pingpong"), "{err}");
    let (ok, _, err) = perf(&["--pingpong", "--against", "ecal", "--wait", "spin"]);
    assert!(!ok && err.contains("--wait spin"), "{err}");
    let (ok, _, err) = perf(&["--pingpong", "--against", "ecal", "--ecal-cpp", "/nonexistent/shoal-ecal"]);
    assert!(
        !ok && err.contains("scripts/ecal-cpp") && err.contains("/nonexistent/shoal-ecal/shoal-ecal-pingpong"),
        "{err}"
    );
}
