//! eCAL's TCP layer between two "hosts" (network namespaces joined by a veth pair, each process with its own host
//! name, resolvable in both namespaces through `/etc/netns/<ns>/hosts`), in network mode, against eCAL 6.1.1:
//! eCAL publisher → shoal subscriber and shoal publisher → eCAL subscriber, UDP and shared memory switched off on
//! both ends so TCP carries everything (checked: the shoal subscriber counts the layer each message came through,
//! eCAL's monitor shows the shoal publisher's active layer), 64 B, 1 MB and 8 MB messages, every one accounted
//! for (shoal → eCAL: all delivered in order; eCAL → shoal: delivered or counted as dropped by the eCAL
//! publisher); a publisher killed and replaced while the subscriber stays. TCP over a lossy link is in
//! `impair_netns.rs`.
//!
//! Needs root (`ip netns`); without it every test here prints why and passes without running.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{NetnsPair, PEER, Proc, ecal_network_dir, ecal_python, root_or_skip, script, topic, write_ini};

/// Network mode, subscribers receive TCP only.
fn tcp_sub_ini(name: &str) -> String {
    write_ini(
        name,
        "[network]\nnetwork_enabled = true\n[subscriber]\nshm_rec_enabled = false\nudp_mc_rec_enabled = false\n\
         tcp_rec_enabled = true\n",
    )
}

/// Network mode, publishers serve TCP only.
fn tcp_pub_ini(name: &str) -> String {
    write_ini(
        name,
        "[network]\nnetwork_enabled = true\n[publisher]\nuse_shm = false\nuse_udp_mc = false\nuse_tcp = true\n",
    )
}

/// (size, count, rate): 64 B, 1 MB and 8 MB messages.
const SIZES: [(usize, u64, u32); 3] = [(64, 200, 200), (1_000_000, 20, 20), (8_000_000, 4, 2)];

const HOSTS: [&str; 2] = ["ecal-a", "shoal-b"];

/// Time a publisher waits after the match: the subscriber connects only once the publisher's TCP port is
/// announced (a registration round), as with eCAL itself.
const START_DELAY_MS: &str = "2000";

fn shoal_sub(net: &NetnsPair, ini: &str, t: &str, count: u64) -> Proc {
    let count = count.to_string();
    let args = ["sub", "--topic", t, "--count", &count, "--idle-ms", "15000", "--until-accounted"];
    let mut cmd = net.command(1, HOSTS[1], PEER, &args);
    cmd.env("ECAL_INI", ini);
    let sub = Proc::spawn("shoal sub", cmd);
    sub.expect("ready", Duration::from_secs(10));
    sub
}

fn ecal_pub(net: &NetnsPair, t: &str, size: usize, count: u64, rate: u32, linger_ms: &str) -> Proc {
    let python = ecal_python();
    let pub_py = script("pub.py");
    let (size, count, rate) = (size.to_string(), count.to_string(), rate.to_string());
    let args = [
        pub_py.as_str(),
        "--topic",
        t,
        "--layer",
        "tcp",
        "--count",
        &count,
        "--size",
        &size,
        "--rate",
        &rate,
        "--wait-subs",
        "1",
        "--wait-ms",
        "20000",
        "--start-delay-ms",
        START_DELAY_MS,
        "--linger-ms",
        linger_ms,
    ];
    let mut cmd = net.command(0, HOSTS[0], &python, &args);
    cmd.current_dir(ecal_network_dir());
    let publ = Proc::spawn("eCAL pub", cmd);
    let ready = publ.expect("ready", Duration::from_secs(15));
    assert_eq!(ready["host_name"], HOSTS[0]);
    assert_eq!(ready["layers"], serde_json::json!({"udp": false, "shm": false, "tcp": true}), "{ready}");
    publ
}

/// Checks a `shoal-peer sub` summary: `count` messages accounted for (received intact and in order, or counted as
/// dropped: eCAL's tcp_pubsub publisher keeps only the newest pending message for a connection that is still
/// writing the one before, so a subscriber late by a message loses one, which shoal counts from the clock gap),
/// everything received through TCP.
fn assert_accounted_over_tcp(name: &str, summary: &Value, count: u64, publishers: u64) {
    eprintln!("{name}: shoal subscriber {summary}");
    let received = summary["received"].as_u64().expect("received");
    let drops = summary["drops"].as_u64().expect("drops");
    assert_eq!(received + drops, count, "{name}: every message received or counted as dropped: {summary}");
    assert!(received >= count * 9 / 10, "{name}: at most a tenth dropped: {summary}");
    assert_eq!(summary["torn"], 0, "{name}: {summary}");
    assert_eq!(summary["out_of_order"], 0, "{name}: {summary}");
    assert_eq!(summary["publishers"], publishers, "{name}: {summary}");
    assert_eq!(summary["via"], serde_json::json!({"tcp": received}), "{name}: every message came over TCP: {summary}");
}

#[test]
fn ecal_pub_to_shoal_sub_over_tcp_across_namespaces() {
    if !root_or_skip("ecal_pub_to_shoal_sub_over_tcp_across_namespaces") {
        return;
    }
    let net = NetnsPair::create("t", 11);
    net.hosts(HOSTS);
    let ini = tcp_sub_ini("tcp_sub_b");
    for (size, count, rate) in SIZES {
        let name = format!("tcp_e2s_{size}");
        let t = topic(&name);
        let sub = shoal_sub(&net, &ini, &t, count);
        let mut publ = ecal_pub(&net, &t, size, count, rate, "1000");
        let done = publ.expect("done", Duration::from_secs(60));
        let mut sub = sub;
        if done["sent"] != count {
            // Seen rarely under load: the eCAL publisher did not see the subscriber. What did the subscriber's
            // registration send and receive meanwhile?
            let s = sub.expect("summary", Duration::from_secs(45));
            panic!("{name}: the eCAL publisher sent {done}\nshoal subscriber: {s}\nits stderr:\n{}", sub.stderr());
        }
        assert_eq!(done["failed_sends"], 0, "{name}: {done}");
        let summary = sub.expect("summary", Duration::from_secs(30));
        assert_accounted_over_tcp(&name, &summary, count, 1);
        sub.wait_success(Duration::from_secs(5));
        publ.wait_success(Duration::from_secs(15));
    }
}

/// shoal → eCAL: the shoal publisher dropped nothing (every message went into the connection); the eCAL
/// subscriber got the messages intact, once, in order. tcp_pubsub's subscriber hands messages to its callback
/// through a one-element queue, so while a (Python) callback runs, a newer message replaces a waiting one: the
/// clocks it missed are those gaps, and they must be few.
fn finish_transfer_to_ecal_sub(name: &str, mut publ: Proc, mut sub: Proc, ready: &Value, count: u64, size: usize) {
    let done = publ.expect("done", Duration::from_secs(60));
    assert_eq!(done["sent"], count, "{name}: the publisher sent everything: {done}");
    assert_eq!(done["drops"], 0, "{name}: shoal's TCP layer dropped nothing: {done}");
    let mut lines = sub.until("summary", Duration::from_secs(60));
    let summary = lines.pop().expect("summary");
    eprintln!("{name}: shoal publisher {done}\n{name}: eCAL subscriber {summary}");
    let msgs: Vec<Value> = lines.into_iter().filter(|v| v["event"] == "msg").collect();
    let clocks: Vec<u64> = msgs.iter().map(|m| m["send_clock"].as_u64().expect("send_clock")).collect();
    assert!(clocks.windows(2).all(|w| w[0] < w[1]), "{name}: once and in order: {clocks:?}");
    assert!(clocks.iter().all(|c| (1..=count).contains(c)), "{name}: {clocks:?}");
    let missed: Vec<u64> = (1..=count).filter(|c| !clocks.contains(c)).collect();
    eprintln!("{name}: eCAL's subscriber queue replaced {} messages: {missed:?}", missed.len());
    assert!(clocks.len() as u64 >= count * 9 / 10, "{name}: at most a tenth replaced: {missed:?}");
    assert_eq!(clocks.last(), Some(&count), "{name}: the last message arrives (nothing newer replaces it)");
    for m in &msgs {
        assert_eq!(m["intact"], true, "{name}: bytes intact: {m}");
        assert_eq!(m["size"], size, "{m}");
        // eCAL's TCP header names only topic and publisher id (its own writer leaves host and pid empty too).
        assert_eq!(m["pub_host"], "", "{m}");
        assert_eq!(m["pub_entity_id"], ready["publisher_id"], "{name}: eCAL sees our publisher id: {m}");
    }
    assert_eq!(summary["timed_out"], false, "{name}: {summary}");
    sub.wait_success(Duration::from_secs(10));
    publ.wait_success(Duration::from_secs(10));
}

#[test]
fn shoal_pub_to_ecal_sub_over_tcp_across_namespaces() {
    if !root_or_skip("shoal_pub_to_ecal_sub_over_tcp_across_namespaces") {
        return;
    }
    let python = ecal_python();
    let net = NetnsPair::create("u", 12);
    net.hosts(HOSTS);
    let ini = tcp_pub_ini("tcp_pub_b");
    for (size, count, rate) in SIZES {
        let name = format!("tcp_s2e_{size}");
        let t = topic(&name);
        let sub_py = script("sub.py");
        let count_s = count.to_string();
        let mut sub_cmd = net.command(
            0,
            HOSTS[0],
            &python,
            &[
                &sub_py,
                "--topic",
                &t,
                "--count",
                &count_s,
                "--until-clock",
                &count_s,
                "--pattern-only",
                "--layer",
                "tcp",
                "--timeout-ms",
                "60000",
                "--idle-ms",
                "15000",
            ],
        );
        sub_cmd.current_dir(ecal_network_dir());
        let sub = Proc::spawn("eCAL sub", sub_cmd);
        sub.expect("ready", Duration::from_secs(15));
        // eCAL's monitor on the subscriber's host: which layer the shoal publisher announces as active.
        let monitor_py = script("monitor.py");
        let mut mon_cmd = net.command(
            0,
            HOSTS[0],
            &python,
            &[&monitor_py, "--seconds", "30", "--interval-ms", "250", "--topic-contains", &t, "--unit", "tcp_monitor"],
        );
        mon_cmd.current_dir(ecal_network_dir());
        let monitor = Proc::spawn("eCAL monitor", mon_cmd);
        monitor.expect("ready", Duration::from_secs(15));
        let (size_s, rate_s) = (size.to_string(), rate.to_string());
        let mut pub_cmd = net.command(
            1,
            HOSTS[1],
            PEER,
            &[
                "pub",
                "--topic",
                &t,
                "--count",
                &count_s,
                "--size",
                &size_s,
                "--rate",
                &rate_s,
                "--wait-subs",
                "1",
                "--start-delay-ms",
                START_DELAY_MS,
                "--linger-ms",
                "1000",
            ],
        );
        pub_cmd.env("ECAL_INI", &ini);
        let publ = Proc::spawn("shoal pub", pub_cmd);
        let ready = publ.expect("ready", Duration::from_secs(10));
        let seen = monitor.wait_for(Duration::from_secs(20), |v| {
            v["event"] == "snapshot"
                && v["publishers"].as_array().is_some_and(|ps| {
                    ps.iter().any(|p| p["host_name"] == HOSTS[1] && p["active_layers"] == serde_json::json!(["tcp"]))
                })
        });
        assert!(seen.is_some(), "{name}: eCAL's monitor shows the shoal publisher with TCP as its only active layer");
        finish_transfer_to_ecal_sub(&name, publ, sub, &ready, count, size);
        drop(monitor);
    }
}

/// A publisher killed (no unregistration: its connection just breaks) and a new one started on the same topic:
/// the subscriber, which stays, retries the dead one until its registration expires and takes everything the
/// new one sends.
#[test]
fn tcp_subscriber_survives_a_killed_and_restarted_publisher() {
    if !root_or_skip("tcp_subscriber_survives_a_killed_and_restarted_publisher") {
        return;
    }
    let net = NetnsPair::create("r", 13);
    net.hosts(HOSTS);
    let ini = tcp_sub_ini("tcp_sub_r");
    let t = topic("tcp_restart");
    let (first, second) = (50u64, 50u64);
    let mut sub = shoal_sub(&net, &ini, &t, first + second);
    let mut publ = ecal_pub(&net, &t, 1000, first, 100, "60000");
    let done = publ.expect("done", Duration::from_secs(30));
    assert_eq!(done["sent"], first, "{done}");
    // Everything of the first publisher arrived before it is killed.
    sub.expect_line("first message", Duration::from_secs(10), |v| v["event"] == "first");
    std::thread::sleep(Duration::from_millis(500));
    publ.sigkill();
    let mut publ2 = ecal_pub(&net, &t, 1000, second, 100, "1000");
    let done = publ2.expect("done", Duration::from_secs(30));
    assert_eq!(done["sent"], second, "{done}");
    let summary = sub.expect("summary", Duration::from_secs(30));
    assert_accounted_over_tcp("tcp_restart", &summary, first + second, 2);
    sub.wait_success(Duration::from_secs(5));
    publ2.wait_success(Duration::from_secs(15));
}
