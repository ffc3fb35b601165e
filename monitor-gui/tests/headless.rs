//! `shoal-monitor --headless --json`: one JSON object a line with what the window shows.

use std::process::Command;
use std::time::Duration;

use shoal_monitor::fixture::Fixture;

fn lines(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out).lines().map(|l| serde_json::from_str(l).expect("a JSON object a line")).collect()
}

#[test]
fn headless_json_lists_topics_with_rates_drops_and_latency_per_connection() {
    let mut out = Vec::new();
    let mut fixture = Fixture::new();
    shoal_monitor::headless::run(&mut fixture, Duration::from_millis(160), Duration::from_millis(20), true, &mut out)
        .expect("run");
    let lines = lines(&out);
    assert_eq!(lines.len(), 8, "one line per interval");
    let last = lines.last().expect("a line");
    let topic = |name: &str| {
        last["topics"].as_array().expect("topics").iter().find(|t| t["name"] == name).cloned().expect(name)
    };
    let demo = topic("shoal_demo/0");
    assert!(demo["rate_hz"].as_f64().expect("rate") > 900.0);
    assert!(demo["latency"]["p99_us"].as_f64().expect("p99") > 0.0);
    let conns = demo["connections"].as_array().expect("connections");
    assert_eq!(conns.len(), 2);
    for c in conns {
        assert_eq!(c["via"], "shoal_ring");
        assert!(c["latency"]["p50_us"].as_f64().expect("p50") > 0.0);
        assert!(c["rate_hz"].as_f64().expect("rate") > 900.0);
    }
    let imu = topic("/imu");
    let udp = imu["connections"].as_array().expect("c").iter().find(|c| c["via"] == "udp").cloned().expect("udp");
    assert_eq!(udp["latency"], "clock not shared");
    let camera = topic("/camera");
    assert!(camera["drops"].as_u64().expect("drops") > 0);
    assert!(camera["problems"].as_array().expect("problems").iter().any(|p| p == "drops_rising"));
    assert!(last["processes"].as_array().expect("processes").iter().any(|p| p["kind"] == "eCAL"));
    assert!(lines.iter().any(|l| l["events"].as_array().is_some_and(|e| !e.is_empty())), "events are reported");

    // Services: the view model's figures, a figure not known as null.
    let service = |line: &serde_json::Value, name: &str| {
        line["services"].as_array().expect("services").iter().find(|s| s["name"] == name).cloned().expect(name)
    };
    let calib = service(last, shoal_monitor::fixture::CALIB_SERVICE);
    assert_eq!(
        (calib["servers"].as_u64(), calib["clients"].as_u64(), calib["methods"].as_u64()),
        (Some(1), Some(2), Some(2))
    );
    assert_eq!(calib["call_rate_hz"].as_f64(), Some(6.0), "{calib}");
    let server = &calib["endpoints"][0];
    assert_eq!((server["role"].as_str(), server["unit"].as_str()), (Some("server"), Some("imu_driver")), "{server}");
    assert_eq!((server["host"].as_str(), server["pid"].as_u64()), (Some("lab-pc"), Some(1004)));
    assert!(server["tcp_port"].as_u64().is_some_and(|p| p > 0), "{server}");
    let get = server["methods"].as_array().expect("methods").iter().find(|m| m["name"] == "get").expect("get");
    assert_eq!(get["request"]["name"], "pb.calib.Request");
    assert_eq!(get["response"]["encoding"], "proto");
    assert_eq!(get["call_rate_hz"].as_f64(), Some(shoal_monitor::fixture::CALIB_GET_RATE));
    assert!(get["calls"].as_i64().is_some_and(|n| n > 0));
    assert!(get["errors"].is_null(), "not announced: null, never 0: {get}");
    let first_get = &service(&lines[0], shoal_monitor::fixture::CALIB_SERVICE)["endpoints"][0]["methods"][0];
    assert!(first_get["call_rate_hz"].is_null(), "one registration seen: no rate yet: {first_get}");
    let client = &calib["endpoints"][1];
    assert_eq!(client["role"], "client");
    assert!(client["tcp_port"].is_null(), "{client}");
    let map = service(last, "map_server");
    assert_eq!(map["problems"], serde_json::json!(["no_server"]));
    assert!(map["call_rate_hz"].is_null());
    assert_eq!(last["own_service_counts"]["calls_made"], 0);
}

#[test]
fn the_binary_prints_one_line_per_second_and_exits() {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal-monitor"))
        .args(["--headless", "--json", "--fixture", "--seconds", "2"])
        .output()
        .expect("run shoal-monitor");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = lines(&out.stdout);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["topics"].as_array().expect("topics").len(), 6);
    assert_eq!(lines[0]["services"].as_array().expect("services").len(), 4);
}

/// Without a display the window cannot open: one line that points to `--headless --json`, no backtrace.
#[test]
fn without_a_display_it_says_to_use_headless_in_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal-monitor"))
        .arg("--fixture")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run shoal-monitor");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("--headless --json"), "{err}");
    assert!(!err.contains("backtrace") && !err.contains(".rs:"), "{err}");
}
