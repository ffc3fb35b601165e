//! shoal ↔ shoal over eCAL's UDP data layer on one host (local mode: broadcast to 127.255.255.255:14002).
//!
//! Both peers get an `ecal.ini` that switches off shoal's native ring and eCAL shared memory, so UDP is the only
//! path left. Topics carry the test's pid, so tests may run in parallel with each other and other processes.

mod support;

use std::time::Duration;

use support::{finish_transfer, shoal_peer, topic, write_ini};

/// An `ecal.ini` that leaves UDP as the only transport between two shoal processes.
fn udp_only_ini(send_mode: Option<&str>) -> String {
    let mut text =
        "[shoal_shm_ring]\nenabled = false\n[publisher]\nuse_shm = false\n[subscriber]\nshm_rec_enabled = false\n"
            .to_string();
    if let Some(m) = send_mode {
        text.push_str(&format!("[shoal_network]\nsend_mode = {m}\n"));
    }
    write_ini(&format!("udp_only_{}", send_mode.unwrap_or("default")), &text)
}

/// Runs a subscriber and a publisher peer over UDP and checks that every message arrived once, in order, intact.
fn transfer(name: &str, count: u64, size: usize, rate: u32) {
    transfer_in(name, count, size, rate, None);
}

/// [`transfer`] with `[shoal_network] send_mode` set on both peers.
fn transfer_in(name: &str, count: u64, size: usize, rate: u32, send_mode: Option<&str>) {
    let ini = udp_only_ini(send_mode);
    let t = topic(name);
    let (count_s, size_s, rate_s) = (count.to_string(), size.to_string(), rate.to_string());
    let sub = shoal_peer("shoal sub", &["sub", "--topic", &t, "--count", &count_s, "--idle-ms", "8000"], Some(&ini));
    sub.expect("ready", Duration::from_secs(10));
    let publ = shoal_peer(
        "shoal pub",
        &["pub", "--topic", &t, "--count", &count_s, "--size", &size_s, "--rate", &rate_s, "--wait-subs", "1"],
        Some(&ini),
    );
    finish_transfer(name, publ, sub, count);
}

#[test]
fn small_messages_over_udp() {
    transfer("small", 500, 64, 2000);
}

#[test]
fn one_megabyte_messages_over_udp_fragmented() {
    transfer("1mb", 20, 1_000_000, 40);
}

#[test]
fn messages_just_above_the_fragmentation_limit() {
    // 65,483 framed bytes is the largest unfragmented message; a 70,000-byte payload needs two fragments.
    transfer("70k", 100, 70_000, 500);
}

// The same transfers with UDP data sent by the I/O thread (`sendmmsg` batches, GSO runs of the small messages).

#[test]
fn small_messages_over_udp_sent_by_the_io_thread() {
    transfer_in("small_io", 500, 64, 2000, Some("io_thread"));
}

#[test]
fn one_megabyte_messages_sent_by_the_io_thread() {
    transfer_in("1mb_io", 20, 1_000_000, 40, Some("io_thread"));
}

#[test]
fn a_burst_of_small_messages_sent_by_the_io_thread() {
    // 2,000 messages as fast as the publisher can: batched, and within the default 5 MB receive buffer (about 1 KB
    // of kernel memory per small datagram) even if the receiver does not run meanwhile.
    transfer_in("burst_io", 2_000, 64, 0, Some("io_thread"));
}
