//! Log messages against the real eCAL 6.1.1 (the `eclipse-ecal` wheel; peer `tools/tests/ecal/log_peer.py`), in
//! local mode, both ways: an eCAL process's `e.logging.log` records appear in `shoal log --json` with their level,
//! process, unit, host and content (and `--level` filters them), and the records `shoal-peer log` sends through
//! `shoal::logging`'s tracing layer are handed out by eCAL's own log receiver (`e.logging.get_logging()`).

mod support;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use support::{PEER, Proc, ecal_peer};

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");
const T: Duration = Duration::from_secs(30);

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name").trim().to_string()
}

fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as i64
}

/// `shoal log --json` with `args`, as a child whose lines are the records.
fn shoal_log(name: &str, args: &[&str]) -> Proc {
    let mut cmd = Command::new(SHOAL);
    cmd.args(["log", "--json", "--duration", "60"]).args(args);
    Proc::spawn(name, cmd)
}

/// The records `p` printed until `n` came (or `T` passed).
fn records(p: &Proc, n: usize) -> Vec<Value> {
    let mut got = Vec::new();
    let deadline = Instant::now() + T;
    while got.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match p.wait_for(left, |_| true) {
            Some(v) => got.push(v),
            None => panic!("{} of {n} records within {T:?}: {got:?}\n{}", got.len(), p.report()),
        }
    }
    got
}

#[test]
fn ecal_log_messages_appear_in_shoal_log() {
    let text = format!("ecal_to_shoal_{}", std::process::id());
    let all = shoal_log("shoal log", &["--grep", &text]);
    let errors = shoal_log("shoal log --level error", &["--grep", &text, "--level", "error"]);
    // Both receivers bind the log port before eCAL's first record (eCAL's initialize alone takes longer).
    std::thread::sleep(Duration::from_millis(500));
    let sender = ecal_peer("log_peer.py send", "log_peer.py", &["send", "--unit", "ecal_log_sender", "--text", &text]);
    let ready = sender.expect("ready", T);
    sender.expect("done", T);

    // The four levels, in order: warning, error, info, fatal (each once).
    let got = records(&all, 4);
    let levels: Vec<(&str, i64)> =
        got.iter().map(|r| (r["level"].as_str().unwrap(), r["level_value"].as_i64().unwrap())).collect();
    assert_eq!(levels, [("warning", 2), ("error", 4), ("info", 1), ("fatal", 8)], "{got:?}");
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r["content"], format!("{text} {i} {}", r["level"].as_str().unwrap()), "{r}");
        assert_eq!(r["unit_name"], "ecal_log_sender", "{r}");
        assert_eq!(r["process_id"], ready["pid"], "{r}");
        assert!(r["process_name"].as_str().unwrap().contains("python"), "{r}");
        assert_eq!(r["host_name"], host_name(), "{r}");
        assert!((now_us() - r["time_us"].as_i64().unwrap()).abs() < 60_000_000, "{r}");
    }
    // --level error: error and fatal only.
    let got = records(&errors, 2);
    let levels: Vec<&str> = got.iter().map(|r| r["level"].as_str().unwrap()).collect();
    assert_eq!(levels, ["error", "fatal"], "{got:?}");
    assert!(errors.wait_for(Duration::from_millis(500), |_| true).is_none(), "{}", errors.report());
}

#[test]
fn shoal_log_messages_reach_ecal_log_receiver() {
    let text = format!("shoal_to_ecal_{}", std::process::id());
    let receiver = ecal_peer(
        "log_peer.py receive",
        "log_peer.py",
        &["receive", "--unit", "ecal_log_receiver", "--text", &text, "--expect", "3", "--seconds", "25"],
    );
    receiver.expect("ready", T);
    let run_peer = |level: &str, count: &str| -> Value {
        let out = Command::new(PEER)
            .args(["log", "--level", level, "--count", count, "--interval-ms", "20", "--text", &text])
            .args(["--unit", "shoal_log_unit"])
            .output()
            .expect("shoal-peer log");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("done line")
    };
    // DEBUG (eCAL's debug1) is not among the levels `[monitoring] filter_log_udp` selects by default: not sent.
    let done = run_peer("debug", "2");
    assert_eq!((done["stats"]["queued"].as_u64(), done["stats"]["sent"].as_u64()), (Some(0), Some(0)), "{done}");
    let done = run_peer("error", "3");
    assert_eq!(done["stats"]["sent"], 3, "{done}");
    assert_eq!(done["flushed"], true, "{done}");
    let lines = receiver.until("done", T);
    let got: Vec<&Value> = lines.iter().filter(|l| l["event"] == "record").collect();
    assert_eq!(got.len(), 3, "{}", receiver.report());
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r["content"], format!("{text} {i}"), "{r}");
        assert_eq!((r["level"].as_str(), r["level_value"].as_i64()), (Some("error"), Some(4)), "{r}");
        assert_eq!(r["unit_name"], "shoal_log_unit", "{r}");
        assert!(r["process_name"].as_str().unwrap().ends_with("shoal-peer"), "{r}");
        assert_eq!(r["process_id"], done["pid"], "{r}");
        assert_eq!(r["host_name"], host_name(), "{r}");
        assert!((now_us() - r["time"].as_i64().unwrap()).abs() < 60_000_000, "{r}");
    }
}
