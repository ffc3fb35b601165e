//! `shoal topic pub | echo | list` between two shoal processes.

use std::process::{Command, Stdio};
use std::time::Duration;

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

#[test]
fn pub_reaches_echo_with_metadata() {
    let topic = format!("cli_test_{}", std::process::id());
    let echo = Command::new(SHOAL)
        .args(["topic", "echo", &topic, "--count", "3", "--json", "--timeout", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn echo");
    // `pub` waits for the subscriber (up to 10 s), so all 3 messages reach it.
    let publ = Command::new(SHOAL)
        .args(["topic", "pub", &topic, "héllo wörld", "--count", "3", "--rate", "20", "--wait-timeout", "10"])
        .args(["--type", "demo.Text", "--encoding", "raw"])
        .spawn()
        .expect("spawn pub");
    let out = echo.wait_with_output().expect("echo output");
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    assert_eq!(lines.len(), 3);
    for (i, v) in lines.iter().enumerate() {
        assert_eq!(v["topic"], topic.as_str());
        assert_eq!(v["payload_utf8"], "héllo wörld");
        assert_eq!(v["size"], "héllo wörld".len());
        assert_eq!(v["clock"], i as u64 + 1);
        assert_eq!(v["type_name"], "demo.Text");
        assert_eq!(v["encoding"], "raw");
        assert!(v["pid"].as_u64().unwrap_or(0) > 0, "{v}");
    }
    let mut publ = publ;
    assert!(publ.wait().expect("pub").success());
}

#[test]
fn echo_of_binary_payload_is_hex() {
    let topic = format!("cli_hex_{}", std::process::id());
    let echo = Command::new(SHOAL)
        .args(["topic", "echo", &topic, "--count", "1", "--json", "--timeout", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn echo");
    // A control character makes the payload non-text.
    let st =
        Command::new(SHOAL).args(["topic", "pub", &topic, "a\u{1}b", "--wait-timeout", "10"]).status().expect("pub");
    assert!(st.success());
    let out = echo.wait_with_output().expect("echo");
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).expect("json");
    assert_eq!(v["payload_hex"], "610162");
    assert!(v.get("payload_utf8").is_none());
}

#[test]
fn list_shows_publisher_and_subscriber_with_type_info() {
    let topic = format!("cli_list_{}", std::process::id());
    let mut publ = Command::new(SHOAL)
        .args(["topic", "pub", &topic, "x", "--count", "1000", "--rate", "10", "--wait-subs", "0"])
        .args(["--type", "demo.Listed", "--encoding", "raw"])
        .spawn()
        .expect("spawn pub");
    let mut echo = Command::new(SHOAL)
        .args(["topic", "echo", &topic, "--count", "1000"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn echo");
    let list = Command::new(SHOAL).args(["topic", "list", "--json", "--wait-ms", "1500"]).output().expect("list");
    let _ = publ.kill();
    let _ = echo.kill();
    let _ = publ.wait();
    let _ = echo.wait();
    let listed = String::from_utf8_lossy(&list.stdout);
    let mine: Vec<serde_json::Value> = listed
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["topic"] == topic.as_str())
        .collect();
    let p = mine.iter().find(|v| v["direction"] == "pub").unwrap_or_else(|| panic!("no publisher in {listed}"));
    assert_eq!(p["type_name"], "demo.Listed");
    assert_eq!(p["encoding"], "raw");
    assert_eq!(p["pid"], publ.id());
    assert!(mine.iter().any(|v| v["direction"] == "sub" && v["pid"] == echo.id()), "{listed}");
    std::thread::sleep(Duration::from_millis(10));
}
