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

    let out = Command::new(env!("CARGO_BIN_EXE_shoal-monitor"))
        .args(["--headless", "--json", "--seconds", "3"])
        .output()
        .expect("run shoal-monitor");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let last: Value = serde_json::from_str(text.lines().last().expect("a line")).expect("JSON");

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
