//! History for late joiners between processes, through `shoal-peer`: a publisher keeps its last messages
//! (`--history`), sends some before any subscriber exists (`--before`), then waits for subscribers and sends the
//! rest live. A subscriber that asks for history (`--history all`) must receive exactly the kept messages and then
//! every live one, in order, with no gap and no repeat; one that does not ask receives the live ones only.
//!
//! Run with `--nocapture` to see the first clocks each subscriber received, per layer.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Peer, Proc, topic, write_ini};

const T: Duration = Duration::from_secs(30);

/// The first clocks a `shoal-peer sub` summary reports.
fn first_clocks(summary: &Value) -> Vec<u64> {
    summary["first_clocks"].as_array().expect("first_clocks").iter().map(|v| v.as_u64().expect("clock")).collect()
}

/// A publisher that keeps `history`, sends `before` of `count` messages before waiting for `subs` subscribers,
/// then the rest at 200 a second after a pause (so that every subscriber has connected when live data starts).
fn history_publisher(t: &str, ini: &str, history: u32, before: u64, count: u64, subs: u64) -> Proc {
    let publ = Peer::publisher(t, count, 64, 200)
        .arg("--history", history)
        .arg("--before", before)
        .wait_subs(subs)
        .start_delay_ms(1500)
        .linger_ms(1500)
        .ini(ini)
        .spawn("history publisher");
    publ.expect("before", T);
    publ
}

/// Checks a subscriber's summary: it received `expected` clocks, in this order (the first 64 are compared; the
/// rest are counted by the summary's own in-order check), and nothing was dropped.
fn check(layer: &str, name: &str, summary: &Value, expected: std::ops::RangeInclusive<u64>) {
    let via = if layer == "tcp" { "tcp" } else { "shoal_ring" };
    check_via(layer, name, summary, expected.clone(), &[(via, expected.count() as u64)]);
}

/// [`check`] with the messages expected per way of delivery.
fn check_via(layer: &str, name: &str, summary: &Value, expected: std::ops::RangeInclusive<u64>, via: &[(&str, u64)]) {
    let want_via: serde_json::Map<String, Value> = via.iter().map(|(k, n)| (k.to_string(), Value::from(*n))).collect();
    assert_eq!(summary["via"], Value::Object(want_via), "{layer} {name}: {summary}");
    let got = first_clocks(summary);
    println!("{layer}, {name}: first received clocks {:?}", &got[..got.len().min(15)]);
    let want: Vec<u64> = expected.clone().take(got.len()).collect();
    assert_eq!(got, want, "{layer} {name}: {summary}");
    assert_eq!(summary["received"], expected.count() as u64, "{summary}");
    assert_eq!(summary["out_of_order"], 0, "no repeat: {summary}");
    assert_eq!(summary["torn"], 0, "{summary}");
    assert_eq!(summary["drops"], 0, "no gap counted as a loss: {summary}");
}

/// Runs the scenario over the layer `ini` selects: 30 sent before the subscribers, 10 kept, 30 more live.
fn late_joiners(layer: &str, ini: &str) {
    let t = topic(&format!("history_{layer}"));
    let mut publ = history_publisher(&t, ini, 10, 30, 60, 2);
    let mut with = Peer::subscriber(&t, 40).arg("--history", "all").ini(ini).spawn_ready("subscriber with history");
    let mut without = Peer::subscriber(&t, 30).ini(ini).spawn_ready("subscriber without history");
    let s = with.expect("summary", T);
    check(layer, "subscriber with history", &s, 21..=60);
    let s = without.expect("summary", T);
    check(layer, "subscriber without history", &s, 31..=60);
    let done = publ.expect("done", T);
    assert_eq!(done["sent"], 60, "{done}");
    with.wait_success(T);
    without.wait_success(T);
    publ.wait_success(T);
}

#[test]
fn ring_late_subscriber_gets_the_history_then_live_data() {
    late_joiners("native ring", &write_ini("history_ring", "[shoal_shm_ring]\nslot_count = 64\n"));
}

#[test]
fn ring_history_is_bounded_by_the_subscribers_depth() {
    let ini = write_ini("history_ring_depth", "[shoal_shm_ring]\nslot_count = 64\n");
    let t = topic("history_ring_depth");
    let mut publ = history_publisher(&t, &ini, 10, 30, 60, 1);
    let mut sub = Peer::subscriber(&t, 34).arg("--history", 4).ini(&ini).spawn_ready("subscriber with history 4");
    let s = sub.expect("summary", T);
    check("native ring", "subscriber with history 4", &s, 27..=60);
    sub.wait_success(T);
    publ.wait_success(T);
}

#[test]
fn ring_history_is_bounded_by_the_publishers_byte_budget() {
    // 64-byte messages, 200 bytes kept: 3 of them.
    let ini = write_ini("history_ring_bytes", "[shoal_shm_ring]\nslot_count = 64\n[shoal_history]\nmax_bytes = 200\n");
    let t = topic("history_ring_bytes");
    let mut publ = history_publisher(&t, &ini, 10, 30, 60, 1);
    let mut sub = Peer::subscriber(&t, 33).arg("--history", "all").ini(&ini).spawn_ready("subscriber with history");
    let s = sub.expect("summary", T);
    check("native ring", "subscriber with history, 200-byte budget", &s, 28..=60);
    sub.wait_success(T);
    publ.wait_success(T);
}

/// Shoal peers that talk over eCAL's TCP layer only (no native ring, no UDP, no eCAL shared memory).
fn tcp_ini(name: &str) -> String {
    write_ini(
        name,
        "[publisher]\nuse_shm = false\nuse_udp_mc = false\nuse_tcp = true\n[subscriber]\nshm_rec_enabled = false\n\
         udp_mc_rec_enabled = false\ntcp_rec_enabled = true\n[shoal_shm_ring]\nenabled = false\n",
    )
}

#[test]
fn tcp_late_subscriber_gets_the_history_then_live_data() {
    late_joiners("tcp", &tcp_ini("history_tcp"));
}

/// Shoal peers whose live data goes over eCAL's UDP layer (no native ring, no eCAL shared memory; TCP receive off,
/// as by default): a subscriber asking for history fetches it over a TCP connection for the history only.
fn udp_ini(name: &str) -> String {
    write_ini(
        name,
        "[publisher]\nuse_shm = false\nuse_udp_mc = true\nuse_tcp = true\n[subscriber]\nshm_rec_enabled = false\n\
         udp_mc_rec_enabled = true\ntcp_rec_enabled = false\n[shoal_shm_ring]\nenabled = false\n",
    )
}

/// Over UDP the kept messages come over TCP (10), the live ones over UDP (30); the subscriber without history gets
/// the live ones only.
#[test]
fn udp_late_subscriber_gets_the_history_then_live_data() {
    let ini = udp_ini("history_udp");
    let t = topic("history_udp");
    let mut publ = history_publisher(&t, &ini, 10, 30, 60, 2);
    let mut with = Peer::subscriber(&t, 40).arg("--history", "all").ini(&ini).spawn_ready("subscriber with history");
    let mut without = Peer::subscriber(&t, 30).ini(&ini).spawn_ready("subscriber without history");
    let s = with.expect("summary", T);
    check_via("udp", "subscriber with history", &s, 21..=60, &[("tcp", 10), ("udp", 30)]);
    let s = without.expect("summary", T);
    check_via("udp", "subscriber without history", &s, 31..=60, &[("udp", 30)]);
    let done = publ.expect("done", T);
    assert_eq!(done["sent"], 60, "{done}");
    with.wait_success(T);
    without.wait_success(T);
    publ.wait_success(T);
}

/// Subscribers join a publisher that sends all the time (500 a second): each one's first messages are kept ones,
/// then live data with no gap and no repeat, whatever the publisher was sending while the subscriber joined.
fn joining_a_running_publisher(layer: &str, via: &str, ini: &str) {
    let t = topic(&format!("history_running_{}", layer.replace(' ', "_")));
    let publ = Peer::publisher(&t, 4000, 64, 500)
        .arg("--history", 50)
        .arg("--before", 100)
        .wait_subs(0)
        .linger_ms(1000)
        .ini(ini)
        .spawn("running history publisher");
    publ.expect("before", T);
    let subs: Vec<Proc> = (0..3)
        .map(|i| {
            std::thread::sleep(Duration::from_millis(300));
            Peer::subscriber(&t, 300).arg("--history", "all").ini(ini).spawn_ready(&format!("joining subscriber {i}"))
        })
        .collect();
    for (i, sub) in subs.into_iter().enumerate() {
        let mut sub = sub;
        let s = sub.expect("summary", T);
        let got = first_clocks(&s);
        println!("{layer}, subscriber {i} joining a running publisher: first received clocks {:?}", &got[..15]);
        let first = got[0];
        assert_eq!(got, (first..first + got.len() as u64).collect::<Vec<u64>>(), "one run of clocks: {s}");
        assert_eq!(s["received"], 300, "{s}");
        assert_eq!(s["out_of_order"], 0, "{s}");
        assert_eq!(s["drops"], 0, "{s}");
        if via == "udp" {
            // The kept messages over TCP, then live data over UDP (the live messages that came before the history
            // waited for it).
            let tcp = s["via"]["tcp"].as_u64().unwrap_or(0);
            assert!(tcp > 0 && s["via"]["udp"].as_u64() == Some(300 - tcp), "{s}");
        } else {
            assert_eq!(s["via"][via], 300, "{s}");
        }
        // The first message is a kept one: sent before the subscriber existed.
        assert!(s["first_sent_before_created_ms"].as_f64().expect("first sent") > 0.0, "{s}");
        sub.wait_success(T);
    }
    drop(publ);
}

#[test]
fn tcp_subscribers_joining_a_running_publisher_see_one_run_of_clocks() {
    joining_a_running_publisher("tcp", "tcp", &tcp_ini("history_tcp_running"));
}

/// eCAL's shared-memory layer between shoal peers (native ring off, no UDP): as over UDP, the kept messages come
/// over TCP and live data through the memfile, merged in order.
#[test]
fn ecal_shm_late_subscriber_gets_the_history_then_live_data() {
    let ini = write_ini(
        "history_shm",
        "[publisher]\nuse_shm = true\nuse_udp_mc = false\nuse_tcp = true\n[subscriber]\nshm_rec_enabled = true\n\
         udp_mc_rec_enabled = false\ntcp_rec_enabled = false\n[shoal_shm_ring]\nenabled = false\n",
    );
    let t = topic("history_shm");
    let mut publ = history_publisher(&t, &ini, 10, 30, 60, 1);
    let mut sub = Peer::subscriber(&t, 40).arg("--history", "all").ini(&ini).spawn_ready("subscriber with history");
    let s = sub.expect("summary", T);
    check_via("eCAL shm", "subscriber with history", &s, 21..=60, &[("shm", 30), ("tcp", 10)]);
    sub.wait_success(T);
    publ.wait_success(T);
}

/// A publisher whose TCP layer is off cannot send its history to a UDP subscriber: its registration names no port,
/// so the subscriber counts the history as missed and delivers live data at once, none lost.
#[test]
fn udp_a_history_that_cannot_come_is_counted_as_missed_and_live_data_goes_on() {
    let ini = udp_ini("history_udp_missed");
    let no_tcp = write_ini(
        "history_udp_missed_pub",
        "[publisher]\nuse_shm = false\nuse_udp_mc = true\nuse_tcp = false\n[shoal_shm_ring]\nenabled = false\n",
    );
    let t = topic("history_udp_missed");
    let mut publ = history_publisher(&t, &no_tcp, 10, 30, 60, 1);
    let mut sub = Peer::subscriber(&t, 30).arg("--history", "all").ini(&ini).spawn_ready("subscriber with history");
    let s = sub.expect("summary", T);
    check_via("udp", "subscriber whose history cannot come", &s, 31..=60, &[("udp", 30)]);
    assert_eq!(s["history_missed"], 1, "{s}");
    // Nothing waited for a history that could not come (live data sent 5 ms apart, right after the match).
    assert!(s["max_latency_us"].as_u64().expect("max latency") < 500_000, "{s}");
    sub.wait_success(T);
    publ.wait_success(T);
}

#[test]
fn udp_subscribers_joining_a_running_publisher_see_one_run_of_clocks() {
    joining_a_running_publisher("udp", "udp", &udp_ini("history_udp_running"));
}

#[test]
fn ring_subscribers_joining_a_running_publisher_see_one_run_of_clocks() {
    let ini = write_ini("history_ring_running", "[shoal_shm_ring]\nslot_count = 64\n");
    joining_a_running_publisher("native ring", "shoal_ring", &ini);
}

/// eCAL 6.1.1's TCP subscriber of a publisher with a history, beside a shoal subscriber that asks for it: eCAL's
/// handshake asks for nothing, so it gets live data only, in order and once, exactly as from any publisher, while
/// the shoal subscriber gets the history then the same live data.
#[test]
fn tcp_an_ecal_subscriber_gets_live_data_only_beside_a_shoal_subscriber_with_history() {
    use std::net::ToSocketAddrs;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name").trim().to_string();
    let resolved: Vec<_> = (host.as_str(), 0).to_socket_addrs().map(Iterator::collect).unwrap_or_default();
    if resolved.is_empty() || resolved.iter().any(|a| !a.ip().is_loopback()) {
        // eCAL connects to what the host name resolves to; a local-mode listener is on loopback only (README).
        eprintln!("skipped: host name {host} resolves to {resolved:?}, not to loopback addresses only");
        return;
    }
    let ini = tcp_ini("history_tcp_ecal");
    let t = topic("history_tcp_ecal");
    let mut ecal = Peer::ecal_subscriber(&t, 30, "tcp")
        .arg("--until-clock", 60)
        .flag("--pattern-only")
        .timeout_ms(40000)
        .idle_ms(15000)
        .spawn_ready("eCAL sub");
    let mut publ = history_publisher(&t, &ini, 10, 30, 60, 2);
    let mut shoal = Peer::subscriber(&t, 40).arg("--history", "all").ini(&ini).spawn_ready("shoal sub with history");
    let s = shoal.expect("summary", T);
    check("tcp", "shoal subscriber with history beside eCAL's", &s, 21..=60);
    let mut lines = ecal.until("summary", Duration::from_secs(40));
    let summary = lines.pop().expect("summary");
    let clocks: Vec<u64> =
        lines.iter().filter(|v| v["event"] == "msg").map(|m| m["send_clock"].as_u64().expect("send_clock")).collect();
    println!("tcp, eCAL 6.1.1 subscriber beside it: first received clocks {:?}", &clocks[..clocks.len().min(15)]);
    assert!(clocks.iter().all(|c| (31..=60).contains(c)), "live data only: {clocks:?}");
    assert!(clocks.windows(2).all(|w| w[0] < w[1]), "once and in order: {clocks:?}");
    // eCAL's TCP subscriber keeps only the newest message it has not taken: at most a tenth may be replaced.
    assert!(clocks.len() >= 27, "{clocks:?}");
    assert_eq!(clocks.last(), Some(&60), "{summary}");
    assert_eq!(summary["timed_out"], false, "{summary}");
    shoal.wait_success(T);
    publ.wait_success(T);
    ecal.wait_success(T);
}

/// eCAL 6.1.1's UDP subscriber of a publisher with a history, beside a shoal subscriber that asks for it: the
/// history goes over TCP to the shoal subscriber alone, so eCAL's gets live data only, once and in order.
#[test]
fn udp_an_ecal_subscriber_gets_live_data_only_beside_a_shoal_subscriber_with_history() {
    let ini = udp_ini("history_udp_ecal");
    let t = topic("history_udp_ecal");
    let mut ecal = Peer::ecal_subscriber(&t, 30, "udp")
        .arg("--until-clock", 60)
        .flag("--pattern-only")
        .timeout_ms(40000)
        .idle_ms(15000)
        .spawn_ready("eCAL sub");
    let mut publ = history_publisher(&t, &ini, 10, 30, 60, 2);
    let mut shoal = Peer::subscriber(&t, 40).arg("--history", "all").ini(&ini).spawn_ready("shoal sub with history");
    let s = shoal.expect("summary", T);
    check_via("udp", "shoal subscriber with history beside eCAL's", &s, 21..=60, &[("tcp", 10), ("udp", 30)]);
    let mut lines = ecal.until("summary", Duration::from_secs(40));
    let summary = lines.pop().expect("summary");
    let clocks: Vec<u64> =
        lines.iter().filter(|v| v["event"] == "msg").map(|m| m["send_clock"].as_u64().expect("send_clock")).collect();
    println!("udp, eCAL 6.1.1 subscriber beside it: first received clocks {:?}", &clocks[..clocks.len().min(15)]);
    assert_eq!(clocks, (31..=60).collect::<Vec<u64>>(), "live data only, once and in order: {summary}");
    assert_eq!(summary["timed_out"], false, "{summary}");
    shoal.wait_success(T);
    publ.wait_success(T);
    ecal.wait_success(T);
}

/// A shoal subscriber asking for history of eCAL 6.1.1's UDP publisher: eCAL announces no history, so the live
/// data that came before its registration was known goes to the subscriber as soon as it is, all of it, in order.
#[test]
fn udp_a_shoal_subscriber_asking_for_history_is_served_by_an_ecal_publisher() {
    let ini = udp_ini("history_udp_from_ecal");
    let t = topic("history_udp_from_ecal");
    let count = 50;
    let mut sub = Peer::subscriber(&t, count)
        .arg("--history", "all")
        .idle_ms(15000)
        .flag("--until-accounted")
        .ini(&ini)
        .spawn_ready("shoal sub asking for history");
    let mut publ = Peer::ecal_publisher(&t, count, 64, 100)
        .arg("--layer", "udp")
        .arg("--wait-ms", 20000)
        .start_delay_ms(2000)
        .linger_ms(1000)
        .spawn("eCAL pub");
    let s = sub.expect("summary", T);
    let got = first_clocks(&s);
    println!("udp, eCAL 6.1.1 publisher to a shoal subscriber asking for history: first clocks {:?}", &got[..15]);
    assert_eq!(s["received"], count, "{s}");
    assert_eq!(got, (1..=got.len() as u64).collect::<Vec<u64>>(), "{s}");
    assert_eq!(s["drops"], 0, "{s}");
    assert_eq!(s["out_of_order"], 0, "{s}");
    assert_eq!(s["via"], serde_json::json!({"udp": count}), "{s}");
    sub.wait_success(T);
    publ.wait_success(T);
}

/// A shoal subscriber asking for history connects to eCAL 6.1.1's TCP publisher: its longer handshake is answered
/// as any (tcp_pubsub reads the version byte only), and it receives live data, as from any eCAL publisher.
#[test]
fn tcp_a_shoal_subscriber_asking_for_history_is_served_by_an_ecal_publisher() {
    let ini = tcp_ini("history_tcp_from_ecal");
    let t = topic("history_tcp_from_ecal");
    let count = 50;
    let mut sub = Peer::subscriber(&t, count)
        .arg("--history", "all")
        .idle_ms(15000)
        .flag("--until-accounted")
        .ini(&ini)
        .spawn_ready("shoal sub asking for history");
    let mut publ = Peer::ecal_publisher(&t, count, 64, 100)
        .arg("--layer", "tcp")
        .arg("--wait-ms", 20000)
        .start_delay_ms(2000)
        .linger_ms(1000)
        .spawn("eCAL pub");
    let s = sub.expect("summary", T);
    let got = first_clocks(&s);
    println!("tcp, eCAL 6.1.1 publisher to a shoal subscriber asking for history: first clocks {:?}", &got[..15]);
    let received = s["received"].as_u64().expect("received");
    let drops = s["drops"].as_u64().expect("drops");
    // eCAL's tcp_pubsub keeps only the newest pending message of a connection still writing the one before.
    assert_eq!(received + drops, count, "{s}");
    assert!(received >= count * 9 / 10, "{s}");
    assert_eq!(s["out_of_order"], 0, "{s}");
    assert_eq!(s["via"], serde_json::json!({"tcp": received}), "{s}");
    sub.wait_success(T);
    publ.wait_success(T);
}

/// What a publisher keeps and sent again is in its registration: `shoal topic info` shows it.
#[test]
fn topic_info_shows_what_a_publisher_keeps_and_sent_again() {
    // Over TCP the publisher sends the kept messages itself (a ring reader reads them in place).
    let ini = tcp_ini("history_info");
    let t = topic("history_info");
    let publ = Peer::publisher(&t, 0, 64, 20)
        .arg("--history", 10)
        .arg("--before", 30)
        .start_delay_ms(1500)
        .ini(&ini)
        .spawn("history publisher for topic info");
    publ.expect("before", T);
    let mut sub = Peer::subscriber(&t, 12).arg("--history", "all").ini(&ini).spawn_ready("subscriber");
    let s = sub.expect("summary", T);
    assert_eq!(first_clocks(&s)[..10], (21..=30).collect::<Vec<u64>>()[..], "{s}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["topic", "info", &t, "--wait-ms", "2500"])
        .env("ECAL_INI", &ini)
        .output()
        .expect("shoal topic info");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    let line = text.lines().find(|l| l.trim_start().starts_with("history")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("10 kept (") && line.contains("10 sent again to late joiners"), "{line}");
    sub.wait_success(T);
    drop(publ);
}
