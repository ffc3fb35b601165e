//! shoal ↔ real eCAL 6.1.1 over eCAL's UDP data layer (local mode), both directions, including 1 MB
//! (fragmented) messages. The eCAL peers are the Python scripts in `tools/tests/ecal/` running on the
//! `eclipse-ecal==6.1.1` wheel that `scripts/ecal-venv` installs into `target/ecal-venv`.
//!
//! Both sides use the self-checking payload of `shoal-peer` (clock, time, checksum, pattern), so each side checks
//! the other's bytes; the clock in the payload must equal the sample's clock, which shows order and no loss.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{ecal_peer, ecal_python, finish_transfer, shoal_peer, topic, write_ini};

/// eCAL publisher (eCAL's default layers) → shoal subscriber that disables eCAL shared memory, so the eCAL
/// publisher must start its UDP writer for it.
fn ecal_to_shoal(name: &str, count: u64, size: usize, rate: f64) {
    ecal_python(); // the venv first (made on first use), before any peer's timers run
    let ini = write_ini("ecal_udp_sub", "[subscriber]\nshm_rec_enabled = false\n");
    let t = topic(&format!("ecal_{name}"));
    let sub = shoal_peer(
        "shoal sub",
        &["sub", "--topic", &t, "--count", &count.to_string(), "--idle-ms", "10000"],
        Some(&ini),
    );
    sub.expect("ready", Duration::from_secs(10));
    let publ = ecal_peer(
        "eCAL pub",
        "pub.py",
        &[
            "--topic",
            &t,
            "--count",
            &count.to_string(),
            "--size",
            &size.to_string(),
            "--rate",
            &rate.to_string(),
            "--wait-subs",
            "1",
            "--type-name",
            "ecal.test.Pattern",
        ],
    );
    let ready = publ.expect("ready", Duration::from_secs(15));
    eprintln!("{name}: eCAL publisher {ready}");
    finish_transfer(name, publ, sub, count);
}

/// shoal publisher → eCAL subscriber with only UDP enabled.
fn shoal_to_ecal(name: &str, count: u64, size: usize, rate: f64) {
    ecal_python(); // the venv first (made on first use), before any peer's timers run
    let t = topic(&format!("ecal_{name}"));
    let mut sub = ecal_peer(
        "eCAL sub",
        "sub.py",
        &[
            "--topic",
            &t,
            "--count",
            &count.to_string(),
            "--layer",
            "udp",
            "--timeout-ms",
            "25000",
            "--idle-ms",
            "10000",
        ],
    );
    sub.expect("ready", Duration::from_secs(15));
    let mut publ = shoal_peer(
        "shoal pub",
        &[
            "pub",
            "--topic",
            &t,
            "--count",
            &count.to_string(),
            "--size",
            &size.to_string(),
            "--rate",
            &rate.to_string(),
            "--wait-subs",
            "1",
            "--linger-ms",
            "1500",
        ],
        None,
    );
    let ready = publ.expect("ready", Duration::from_secs(10));
    let publisher_id = ready["publisher_id"].as_u64().expect("publisher id");
    let done = publ.expect("done", Duration::from_secs(25));
    assert_eq!(done["sent"], count);
    let lines = sub.until("summary", Duration::from_secs(25));
    let summary = lines.last().expect("summary").clone();
    eprintln!("{name}: shoal publisher {done}\n{name}: eCAL subscriber {summary}");
    let msgs: Vec<&Value> = lines.iter().filter(|v| v["event"] == "msg").collect();
    let clocks: Vec<u64> = msgs.iter().map(|m| m["send_clock"].as_u64().expect("send_clock")).collect();
    assert_eq!(clocks, (1..=count).collect::<Vec<_>>(), "every message once, in order");
    for m in &msgs {
        assert_eq!(m["intact"], true, "bytes intact: {m}");
        assert_eq!(m["pattern_clock"], m["send_clock"], "payload clock = sample clock: {m}");
        assert_eq!(m["size"], size);
        assert_eq!(m["pub_entity_id"], publisher_id, "eCAL sees our publisher id: {m}");
    }
    // Type information comes from our registration, which eCAL applies by the time the last sample arrives.
    assert_eq!(msgs.last().expect("a message")["type_name"], "shoal.test.Pattern");
    assert_eq!(summary["received"], count);
    assert_eq!(summary["intact"], count);
    assert_eq!(summary["timed_out"], false);
    sub.wait_exit_reported(Duration::from_secs(10));
    publ.wait_success(Duration::from_secs(5));
}

#[test]
fn ecal_pub_to_shoal_sub_over_udp() {
    ecal_to_shoal("e2s", 200, 256, 200.0);
}

#[test]
fn ecal_pub_to_shoal_sub_1mb_fragmented() {
    ecal_to_shoal("e2s_1mb", 3, 1_000_000, 2.0);
}

#[test]
fn shoal_pub_to_ecal_sub_over_udp() {
    shoal_to_ecal("s2e", 200, 256, 200.0);
}

#[test]
fn shoal_pub_to_ecal_sub_1mb_fragmented() {
    shoal_to_ecal("s2e_1mb", 3, 1_000_000, 1.0);
}
