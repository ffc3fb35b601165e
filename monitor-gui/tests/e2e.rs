//! End to end: real publishers and subscribers — two shoal processes over the native ring, and an eCAL 6.1.1
//! Python publisher read by a shoal subscriber — and `shoal-monitor --headless --json` listing them with their
//! rates and latency per connection. The shoal peers are the tools' `shoal-peer`, built beside this crate's binary
//! by the workspace test command (SKIPPED when it is missing, e.g. under `cargo test -p shoal-monitor` alone).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

#[path = "../../tools/tests/support/process.rs"]
#[allow(dead_code)] // the tools' tests use the rest
mod support;

use support::{Proc, ecal_python, script};

const T: Duration = Duration::from_secs(30);

fn shoal_peer(args: &[&str]) -> Option<Proc> {
    let peer = PathBuf::from(env!("CARGO_BIN_EXE_shoal-monitor")).with_file_name("shoal-peer");
    if !peer.is_file() {
        return None;
    }
    let mut cmd = Command::new(peer);
    cmd.args(args);
    Some(Proc::spawn("shoal-peer", cmd))
}

/// The last line of `shoal-monitor --headless --json --seconds 3`.
fn headless_last_line() -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal-monitor"))
        .args(["--headless", "--json", "--seconds", "3"])
        .output()
        .expect("run shoal-monitor");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().expect("a line")).expect("JSON")
}

fn topic<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    line["topics"].as_array()?.iter().find(|t| t["name"] == name)
}

#[test]
fn headless_monitor_lists_shoal_and_ecal_publishers_with_rates_and_latency() {
    let (t_shoal, t_ecal) = (format!("e2e_shoal_{}", std::process::id()), format!("e2e_ecal_{}", std::process::id()));
    let Some(sub) = shoal_peer(&["sub", "--topic", &t_shoal, "--count", "1000000000", "--idle-ms", "60000"]) else {
        eprintln!("SKIPPED: shoal-peer is not built beside shoal-monitor (run the workspace tests, scripts/test)");
        return;
    };
    sub.expect("ready", T);
    let publ = shoal_peer(&["pub", "--topic", &t_shoal, "--count", "0", "--rate", "200", "--wait-subs", "0"])
        .expect("shoal-peer");
    let ecal_sub =
        shoal_peer(&["sub", "--topic", &t_ecal, "--count", "1000000000", "--idle-ms", "60000"]).expect("shoal-peer");
    ecal_sub.expect("ready", T);
    let mut cmd = Command::new(ecal_python());
    cmd.arg(script("pub.py")).args(["--topic", &t_ecal, "--count", "0", "--rate", "100", "--wait-subs", "0"]);
    let ecal_pub = Proc::spawn("eCAL pub.py", cmd);
    let ecal_ready = ecal_pub.expect("ready", T);
    // Let both streams run for a couple of registration periods.
    std::thread::sleep(Duration::from_secs(3));

    let last = headless_last_line();

    let shoal = topic(&last, &t_shoal).unwrap_or_else(|| panic!("{t_shoal} not listed: {last}"));
    assert!(shoal["rate_hz"].as_f64().unwrap_or(0.0) > 100.0, "{shoal}");
    assert!(shoal["latency"]["p50_us"].as_f64().unwrap_or(0.0) > 0.0, "{shoal}");
    let conn = &shoal["connections"][0];
    assert_eq!(conn["via"], "shoal_ring", "{shoal}");
    assert!(conn["rate_hz"].as_f64().unwrap_or(0.0) > 100.0, "{conn}");
    assert!(conn["latency"]["p99_us"].as_f64().unwrap_or(0.0) >= conn["latency"]["p50_us"].as_f64().unwrap_or(1e9));

    let ecal = topic(&last, &t_ecal).unwrap_or_else(|| panic!("{t_ecal} not listed: {last}"));
    assert_eq!((ecal["publishers"].as_u64(), ecal["subscribers"].as_u64()), (Some(1), Some(1)), "{ecal}");
    assert!(ecal["rate_hz"].as_f64().unwrap_or(0.0) > 50.0, "{ecal}");
    // Measured by the shoal subscriber on eCAL's layer (µs send times).
    assert!(ecal["latency"]["p50_us"].as_f64().unwrap_or(0.0) > 0.0, "{ecal}");
    let ecal_pid = ecal_ready["pid"].as_u64().expect("pid");
    let procs = last["processes"].as_array().expect("processes");
    assert!(procs.iter().any(|p| p["pid"].as_u64() == Some(ecal_pid) && p["kind"] == "eCAL"), "{procs:?}");
    drop((publ, sub, ecal_pub, ecal_sub));
}

/// An eCAL 6.1.1 publisher read by an eCAL 6.1.1 subscriber on this host: no shoal subscriber measures that
/// connection, and the monitor shows it as the two registrations imply it (eCAL's shared memory, first in eCAL's
/// local priority, which both enable by default), with the subscriber's own figures; a shoal process beside them
/// announces its command line, memory and CPU load.
#[test]
fn headless_monitor_shows_an_ecal_to_ecal_connection_and_shoal_process_figures() {
    let t = format!("e2e_ecal2ecal_{}", std::process::id());
    let t_peer = format!("e2e_peer_{}", std::process::id());
    let Some(peer) = shoal_peer(&["pub", "--topic", &t_peer, "--count", "0", "--rate", "100", "--wait-subs", "0"])
    else {
        eprintln!("SKIPPED: shoal-peer is not built beside shoal-monitor (run the workspace tests, scripts/test)");
        return;
    };
    let mut cmd = Command::new(ecal_python());
    cmd.arg(script("sub.py")).args(["--topic", &t, "--count", "0", "--timeout-ms", "60000", "--idle-ms", "60000"]);
    let ecal_sub = Proc::spawn("eCAL sub.py", cmd);
    let mut cmd = Command::new(ecal_python());
    cmd.arg(script("pub.py")).args(["--topic", &t, "--count", "0", "--rate", "100", "--wait-subs", "0"]);
    let ecal_pub = Proc::spawn("eCAL pub.py", cmd);
    ecal_pub.expect("ready", T);
    ecal_sub.expect("msg", T);
    std::thread::sleep(Duration::from_secs(3));

    let last = headless_last_line();
    let topic = topic(&last, &t).unwrap_or_else(|| panic!("{t} not listed: {last}"));
    assert_eq!((topic["publishers"].as_u64(), topic["subscribers"].as_u64()), (Some(1), Some(1)), "{topic}");
    let conns = topic["connections"].as_array().expect("connections");
    assert_eq!(conns.len(), 1, "{topic}");
    let c = &conns[0];
    assert_eq!((c["via"].as_str(), c["measured"].as_bool()), (Some("shm"), Some(false)), "{c}");
    assert!(c["rate_hz"].as_f64().unwrap_or(0.0) > 50.0, "the subscriber's announced rate: {c}");
    assert!(c["messages"].as_u64().unwrap_or(0) > 100, "its data clock: {c}");

    let peer_pid = u64::from(peer.pid());
    let procs = last["processes"].as_array().expect("processes");
    let p = procs.iter().find(|p| p["pid"].as_u64() == Some(peer_pid)).unwrap_or_else(|| panic!("{procs:?}"));
    assert!(p["command_line"].as_str().is_some_and(|c| c.contains(&t_peer)), "{p}");
    assert!(p["memory_bytes"].as_u64().is_some_and(|b| b > 1 << 20), "{p}");
    let load = p["cpu_load"].as_f64().unwrap_or(-1.0);
    assert!((0.0..2.0).contains(&load), "a 100 Hz publisher uses some of one core: {p}");
    drop((peer, ecal_pub, ecal_sub));
}

/// `shoal list --json` and `shoal-monitor --headless --json`, run side by side on one live system, show the same
/// figures for each topic (both use the core's one summary of a topic): publishers, subscribers, the mismatch of
/// two publishers announcing different types (which the monitor used to miss without a subscriber), drops,
/// problems, and rates within the difference one registration refresh can make.
#[test]
fn the_cli_and_the_monitor_agree_on_a_live_system() {
    let shoal_cli = PathBuf::from(env!("CARGO_BIN_EXE_shoal-monitor")).with_file_name("shoal");
    let id = std::process::id();
    let (live, clash, lonely) = (format!("agree_live_{id}"), format!("agree_clash_{id}"), format!("agree_lonely_{id}"));
    let Some(sub) = shoal_peer(&["sub", "--topic", &live, "--count", "1000000000", "--idle-ms", "60000"]) else {
        eprintln!("SKIPPED: shoal-peer is not built beside shoal-monitor (run the workspace tests, scripts/test)");
        return;
    };
    if !shoal_cli.is_file() {
        eprintln!("SKIPPED: shoal is not built beside shoal-monitor (run the workspace tests, scripts/test)");
        return;
    }
    sub.expect("ready", T);
    let pub_args = |t: &str, rate: &str, ty: &str| {
        ["pub", "--topic", t, "--count", "0", "--rate", rate, "--wait-subs", "0", "--type-name", ty].map(str::to_owned)
    };
    let live_pub = shoal_peer(&pub_args(&live, "200", "demo.A").each_ref().map(String::as_str)).expect("peer");
    let clash_a = shoal_peer(&pub_args(&clash, "50", "demo.A").each_ref().map(String::as_str)).expect("peer");
    let clash_b = shoal_peer(&pub_args(&clash, "20", "demo.B").each_ref().map(String::as_str)).expect("peer");
    let lonely_sub =
        shoal_peer(&["sub", "--topic", &lonely, "--count", "1000000000", "--idle-ms", "60000"]).expect("peer");
    lonely_sub.expect("ready", T);
    std::thread::sleep(Duration::from_secs(3));

    // Both at once: the CLI listens 2 s, the monitor's last view is after 2 s.
    let cli = Command::new(&shoal_cli).args(["list", "--json", "--wait-ms", "2000"]).spawn_output();
    let mon =
        Command::new(env!("CARGO_BIN_EXE_shoal-monitor")).args(["--headless", "--json", "--seconds", "2"]).output();
    let cli = cli.join().expect("shoal list");
    let mon = mon.expect("run shoal-monitor");
    assert!(
        cli.status.success() && mon.status.success(),
        "{}{}",
        String::from_utf8_lossy(&cli.stderr),
        String::from_utf8_lossy(&mon.stderr)
    );
    let cli_topics: Vec<Value> = String::from_utf8_lossy(&cli.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["kind"] == "topic")
        .collect();
    let mon_text = String::from_utf8_lossy(&mon.stdout);
    let last: Value = serde_json::from_str(mon_text.lines().last().expect("a line")).expect("JSON");
    for name in [&live, &clash, &lonely] {
        let c = cli_topics
            .iter()
            .find(|t| t["topic"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} not in shoal list"));
        let m = topic(&last, name).unwrap_or_else(|| panic!("{name} not in the monitor: {last}"));
        eprintln!("{name}:\n  shoal list    {c}\n  shoal-monitor {m}");
        assert_eq!(c["publishers"], m["publishers"], "{name}");
        assert_eq!(c["subscribers"], m["subscribers"], "{name}");
        assert_eq!(c["drops"], m["drops"], "{name}");
        let mut cp: Vec<String> =
            c["problems"].as_array().expect("problems").iter().map(|p| p.as_str().unwrap_or("").to_owned()).collect();
        let mut mp: Vec<String> =
            m["problems"].as_array().expect("problems").iter().map(|p| p.as_str().unwrap_or("").to_owned()).collect();
        mp.retain(|p| p != "drops_rising");
        cp.sort();
        mp.sort();
        assert_eq!(cp, mp, "{name}");
        let (cr, mr) = (c["rate_hz"].as_f64().expect("rate"), m["rate_hz"].as_f64().expect("rate"));
        assert!((cr - mr).abs() <= 0.05 * cr.max(mr) + 0.5, "{name}: rates {cr} and {mr}");
    }
    let clash_cli = cli_topics.iter().find(|t| t["topic"] == clash.as_str()).expect("clash");
    assert_eq!(clash_cli["type_mismatch"], true, "{clash_cli}");
    let clash_mon = topic(&last, &clash).expect("clash");
    assert!(clash_mon["problems"].as_array().expect("problems").iter().any(|p| p == "type_mismatch"), "{clash_mon}");
    let live_mon = topic(&last, &live).expect("live");
    assert!(live_mon["rate_hz"].as_f64().unwrap_or(0.0) > 150.0, "{live_mon}");
    drop((live_pub, clash_a, clash_b, sub, lonely_sub));
}

/// `Command::output` on a thread, so that two commands run at once.
trait SpawnOutput {
    fn spawn_output(self) -> std::thread::JoinHandle<std::process::Output>;
}

impl SpawnOutput for &mut Command {
    fn spawn_output(self) -> std::thread::JoinHandle<std::process::Output> {
        let child =
            self.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("spawn");
        std::thread::spawn(move || child.wait_with_output().expect("wait"))
    }
}

/// The `echo` method of the server of `service` in a monitor line: (calls, call rate), if listed.
fn server_echo(line: &Value, service: &str) -> Option<(i64, Option<f64>)> {
    let s = line["services"].as_array()?.iter().find(|s| s["name"] == service)?;
    let server = s["endpoints"].as_array()?.iter().find(|e| e["role"] == "server")?;
    let echo = server["methods"].as_array()?.iter().find(|m| m["name"] == "echo")?;
    Some((echo["calls"].as_i64()?, echo["call_rate_hz"].as_f64()))
}

/// Services on a live system: a shoal server (`shoal-peer serve`) and an eCAL 6.1.1 server (`svc_server.py`) are
/// listed by `shoal-monitor --headless --json` with their processes, ports, methods and types; calls an eCAL 6.1.1
/// client makes to the shoal server and `shoal service call` makes to the eCAL server show, within a few
/// registration periods, as call counts going up by as many and as a call rate above zero.
#[test]
fn headless_monitor_lists_shoal_and_ecal_servers_and_counts_their_calls() {
    let id = std::process::id();
    let (svc_shoal, svc_ecal) = (format!("e2e_svc_shoal_{id}"), format!("e2e_svc_ecal_{id}"));
    let shoal_cli = PathBuf::from(env!("CARGO_BIN_EXE_shoal-monitor")).with_file_name("shoal");
    let Some(server) = shoal_peer(&["serve", "--service", &svc_shoal, "--duration-ms", "0"]) else {
        eprintln!("SKIPPED: shoal-peer is not built beside shoal-monitor (run the workspace tests, scripts/test)");
        return;
    };
    if !shoal_cli.is_file() {
        eprintln!("SKIPPED: shoal is not built beside shoal-monitor (run the workspace tests, scripts/test)");
        return;
    }
    let shoal_ready = server.expect("ready", T);
    let mut cmd = Command::new(ecal_python());
    cmd.arg(script("svc_server.py")).args(["--service", &svc_ecal, "--seconds", "120"]);
    let ecal_server = Proc::spawn("eCAL svc_server.py", cmd);
    ecal_server.expect("ready", T);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal-monitor"));
    cmd.args(["--headless", "--json", "--seconds", "120", "--interval-ms", "250"]);
    let monitor = Proc::spawn("shoal-monitor --headless", cmd);

    // Both listed with their methods and types.
    let listed = monitor.expect_line("both servers", T, |l| {
        server_echo(l, &svc_shoal).is_some() && server_echo(l, &svc_ecal).is_some()
    });
    for (name, kind) in [(&svc_shoal, "shoal"), (&svc_ecal, "eCAL")] {
        let s =
            listed["services"].as_array().expect("services").iter().find(|s| s["name"] == name.as_str()).expect(name);
        assert_eq!((s["servers"].as_u64(), s["methods"].as_u64()), (Some(1), Some(2)), "{s}");
        let server = &s["endpoints"][0];
        assert_eq!((server["role"].as_str(), server["kind"].as_str()), (Some("server"), Some(kind)), "{server}");
        assert!(server["tcp_port"].as_u64().is_some_and(|p| p > 0), "{server}");
        let methods = server["methods"].as_array().expect("methods");
        let names: Vec<&str> = methods.iter().filter_map(|m| m["name"].as_str()).collect();
        assert_eq!(names, ["echo", "fail"], "{server}");
        let echo = &methods[0];
        assert_eq!(
            (echo["request"]["name"].as_str(), echo["request"]["encoding"].as_str()),
            (Some("req_t"), Some("raw"))
        );
        assert_eq!(echo["response"]["name"], "resp_t", "{echo}");
        assert!(echo["errors"].is_null(), "not announced: null: {echo}");
    }
    let shoal_server = &listed["services"]
        .as_array()
        .expect("s")
        .iter()
        .find(|s| s["name"] == svc_shoal.as_str())
        .expect("s")["endpoints"][0];
    assert_eq!(shoal_server["pid"], shoal_ready["pid"], "{shoal_server}");
    assert_eq!(shoal_server["tcp_port"], shoal_ready["port"], "{shoal_server}");
    let (shoal0, _) = server_echo(&listed, &svc_shoal).expect("listed");
    let (ecal0, _) = server_echo(&listed, &svc_ecal).expect("listed");

    // Calls: 5 from an eCAL client to the shoal server, 2 from `shoal service call` to the eCAL server.
    let client = ecal_peer_client(&svc_shoal, 5);
    let connected = client.expect("connected", T);
    let calls_started = std::time::Instant::now();
    for _ in 0..2 {
        let out = Command::new(&shoal_cli)
            .args(["service", "call", &svc_ecal, "echo", "--data", "hi", "--json", "--wait-ms", "5000"])
            .output()
            .expect("run shoal service call");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("echo:hi"), "{}", String::from_utf8_lossy(&out.stdout));
    }
    let done = client.until("done", T);
    assert_eq!(done.iter().filter(|l| l["event"] == "response" && l["call_state"] == "executed").count(), 5);
    eprintln!("calls made in {:?} (eCAL client connected after {} ms)", calls_started.elapsed(), connected["ms"]);

    // Within a few registration periods (1 s each) the counts are up by as many, with a rate above zero.
    let mut saw_client = false;
    let mut rates = (None, None);
    let t_calls = std::time::Instant::now();
    let after = monitor.wait_for(Duration::from_secs(8), |l| {
        saw_client |= l["services"].as_array().is_some_and(|a| {
            a.iter().any(|s| s["name"] == svc_shoal.as_str() && s["clients"].as_u64().is_some_and(|n| n >= 1))
        });
        let (Some((a, ra)), Some((b, rb))) = (server_echo(l, &svc_shoal), server_echo(l, &svc_ecal)) else {
            return false;
        };
        if ra.is_some_and(|r| r > 0.0) {
            rates.0 = ra;
        }
        if rb.is_some_and(|r| r > 0.0) {
            rates.1 = rb;
        }
        a >= shoal0 + 5 && b >= ecal0 + 2 && rates.0.is_some() && rates.1.is_some()
    });
    let after = after.unwrap_or_else(|| {
        panic!(
            "the call counts did not go up (shoal {shoal0} + 5, eCAL {ecal0} + 2) with a rate within 8 s; rates seen {rates:?}\n{}",
            monitor.report()
        )
    });
    eprintln!(
        "after {:?}: shoal server {:?}, eCAL server {:?}, rates seen {rates:?}",
        t_calls.elapsed(),
        server_echo(&after, &svc_shoal),
        server_echo(&after, &svc_ecal)
    );
    assert_eq!(server_echo(&after, &svc_shoal).map(|c| c.0), Some(shoal0 + 5), "exactly the calls made");
    assert_eq!(server_echo(&after, &svc_ecal).map(|c| c.0), Some(ecal0 + 2), "exactly the calls made");
    // The eCAL client lives about a second: its registration may come and go between two monitor lines.
    eprintln!("the eCAL client was listed as a client of {svc_shoal}: {saw_client}");
    drop((monitor, server, ecal_server));
}

/// An eCAL 6.1.1 client of `service` making `count` calls of `echo`.
fn ecal_peer_client(service: &str, count: u32) -> Proc {
    let mut cmd = Command::new(ecal_python());
    cmd.arg(script("svc_client.py")).args(["--service", service, "--method", "echo", "--count", &count.to_string()]);
    Proc::spawn("eCAL svc_client.py", cmd)
}
