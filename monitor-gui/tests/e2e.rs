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
