//! End-to-end runs of `shoal perf` (two processes each).

use std::process::Command;

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

#[test]
fn baseline_only_json_covers_every_mode_wait_and_size() {
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
    assert_eq!(lines.len(), 2 * 3 * 2, "{out}");
    for v in &lines {
        assert_eq!(v["system"], "baseline");
        assert_eq!(v["transport"], "baseline_ring");
        assert!(v["p50_ns"].as_u64().unwrap() > 0);
        assert!(v["p50_ns"].as_u64() <= v["p99_ns"].as_u64());
        assert!(v["msgs_per_s"].as_f64().unwrap() > 0.0);
        assert!(v["peer_peak_rss_kb"].as_u64().unwrap() > 0);
        if v["mode"] == "throughput" {
            assert_eq!(v["lost"], 0, "the baseline ring applies back-pressure: {v}");
        } else {
            assert_eq!(v["messages"], 300);
        }
    }
    let modes: Vec<_> = lines.iter().map(|v| (v["wait"].as_str().unwrap(), v["mode"].as_str().unwrap())).collect();
    assert!(modes.contains(&("spin", "zero_copy")) && modes.contains(&("block", "throughput")));
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
