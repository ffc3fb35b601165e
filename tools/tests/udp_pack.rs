//! shoal's packed UDP datagrams (`[shoal_network] send_pack`, `send_mode = io_thread`) between real processes on
//! one host: packed only while every UDP subscriber of the topic is a shoal one that announced it, eCAL's format as
//! soon as an eCAL 6.1.1 subscriber is on the topic too, never with `send_pack = false`.
//!
//! Every peer gets an `ecal.ini` that leaves UDP as the only path (no native ring, no eCAL shared memory).

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Peer, assert_clean_summary, ecal_python, publisher_to_ecal, topic, write_ini};

/// UDP only, sent by the I/O thread, with `send_pack` as given. The send queue holds a whole burst: a burst at full
/// rate fills the default 4096 faster than the I/O thread drains it on a 2-core machine, and what does not fit is
/// dropped (counted as the publisher's drops), which is not what these tests are about.
fn ini(pack: bool) -> String {
    write_ini(
        &format!("udp_pack_{pack}"),
        &format!(
            "[shoal_shm_ring]\nenabled = false\n[publisher]\nuse_shm = false\n[subscriber]\nshm_rec_enabled = false\n\
             [shoal_network]\nsend_mode = io_thread\nsend_pack = {pack}\nsend_queue = 16384\n"
        ),
    )
}

/// A burst of `count` 64-byte messages from a shoal publisher to a shoal subscriber; the subscriber's summary.
fn burst(name: &str, count: u64, ini: &str) -> Value {
    let t = topic(name);
    let mut sub = Peer::subscriber(&t, count).idle_ms(8000).ini(ini).spawn_ready("shoal sub");
    let mut publ = Peer::publisher(&t, count, 64, 0).ini(ini).spawn("shoal pub");
    let done = publ.expect("done", Duration::from_secs(25));
    assert_eq!(done["sent"], count, "the publisher sent everything: {done}");
    assert_eq!(done["drops"], 0, "nothing dropped at the send queue: {done}");
    let summary = sub.expect("summary", Duration::from_secs(15));
    eprintln!("{name}: publisher {done}\n{name}: subscriber {summary}");
    assert_clean_summary(&summary, count);
    sub.wait_success(Duration::from_secs(5));
    publ.wait_success(Duration::from_secs(10));
    summary
}

#[test]
fn a_burst_between_shoal_processes_arrives_packed_complete_and_in_order() {
    let count = 5_000u64;
    let s = burst("pack_burst", count, &ini(true));
    let udp = &s["udp"];
    assert_eq!(udp["packed_messages"], count, "every message arrived in a packed datagram: {udp}");
    let (datagrams, messages) = (udp["packed_datagrams"].as_u64(), udp["packed_messages"].as_u64());
    assert!(datagrams < messages, "several messages per packed datagram: {udp}");
    assert_eq!(udp["lost"], 0, "{udp}");
    assert_eq!(udp["duplicates"], 0, "{udp}");
}

#[test]
fn with_send_pack_off_nothing_is_packed() {
    let count = 2_000u64;
    let s = burst("pack_off", count, &ini(false));
    let udp = &s["udp"];
    assert_eq!(udp["packed_datagrams"], 0, "{udp}");
    assert_eq!(udp["packed_messages"], 0, "{udp}");
    assert_eq!(udp["delivered"], count, "{udp}");
}

/// An eCAL 6.1.1 subscriber and a shoal subscriber on one topic: the shoal publisher sends eCAL's format (eCAL
/// reads every message), and the shoal subscriber gets every message too, none of them packed.
#[test]
fn an_ecal_subscriber_on_the_topic_gets_ecal_format_and_the_shoal_one_too() {
    ecal_python(); // the venv first (made on first use), before any peer's timers run
    let ini = ini(true);
    let t = topic("pack_ecal");
    let count = 300u64;
    let ecal_sub = Peer::ecal_subscriber(&t, count, "udp").timeout_ms(25000).idle_ms(10000).spawn_ready("eCAL sub");
    let mut shoal_sub = Peer::subscriber(&t, count).idle_ms(10000).ini(&ini).spawn_ready("shoal sub");
    let publ = Peer::publisher(&t, count, 64, 2000).wait_subs(2).linger_ms(1500).ini(&ini).spawn("shoal pub");
    let msgs = publisher_to_ecal("pack_ecal", publ, ecal_sub, count);
    let summary = shoal_sub.expect("summary", Duration::from_secs(25));
    eprintln!("pack_ecal: shoal subscriber {summary}");
    assert!(msgs.iter().all(|m| m["size"] == 64), "eCAL read every 64-byte message");
    assert_clean_summary(&summary, count);
    assert_eq!(summary["udp"]["packed_datagrams"], 0, "eCAL is on the topic: nothing packed: {summary}");
    shoal_sub.wait_success(Duration::from_secs(5));
}

/// The same shoal pair at a steady rate: a lone message is sent at once (no flush delay), packed alone.
#[test]
fn paced_messages_between_shoal_processes_arrive_packed() {
    let ini = ini(true);
    let t = topic("pack_paced");
    let count = 200u64;
    let mut sub = Peer::subscriber(&t, count).idle_ms(8000).ini(&ini).spawn_ready("shoal sub");
    let mut publ = Peer::publisher(&t, count, 64, 500).ini(&ini).spawn("shoal pub");
    let done = publ.expect("done", Duration::from_secs(25));
    assert_eq!(done["sent"], count);
    let sub_summary = sub.expect("summary", Duration::from_secs(15));
    sub.wait_success(Duration::from_secs(5));
    publ.wait_success(Duration::from_secs(10));
    assert_clean_summary(&sub_summary, count);
    assert_eq!(sub_summary["udp"]["packed_messages"], count, "{sub_summary}");
    // 2 ms apart, each message leaves before the next is sent: (nearly) one per datagram.
    let datagrams = sub_summary["udp"]["packed_datagrams"].as_u64().unwrap_or(0);
    assert!(datagrams * 2 > count, "paced messages are not held back to be packed: {sub_summary}");
}

/// Packed datagrams reach every UDP receiver on the port (local mode broadcasts every topic to 14002): an eCAL
/// 6.1.1 subscriber of another topic drops them (not `ECAL`) and goes on receiving its own topic.
#[test]
fn an_ecal_receiver_that_gets_packed_datagrams_keeps_receiving() {
    ecal_python(); // the venv first (made on first use), before any peer's timers run
    let t = topic("pack_ecal_other");
    let count = 100u64;
    let ecal_sub = Peer::ecal_subscriber(&t, count, "udp").timeout_ms(40000).idle_ms(30000).spawn_ready("eCAL sub");
    // Meanwhile two shoal processes exchange packed datagrams on another topic, through the same port.
    let s = burst("pack_beside_ecal", 3_000, &ini(true));
    assert!(s["udp"]["packed_datagrams"].as_u64() < s["udp"]["packed_messages"].as_u64(), "{s}");
    let publ = Peer::publisher(&t, count, 64, 500).linger_ms(1500).ini(&ini(true)).spawn("shoal pub");
    let msgs = publisher_to_ecal("pack_ecal_other", publ, ecal_sub, count);
    assert_eq!(msgs.len() as u64, count);
}
