//! shoal ↔ real eCAL 6.1.1 over eCAL's UDP data layer (local mode), both directions, including 1 MB
//! (fragmented) messages. The eCAL peers are the Python scripts in `tools/tests/ecal/` running on the
//! `eclipse-ecal==6.1.1` wheel that `scripts/ecal-venv` installs into `target/ecal-venv`.
//!
//! Both sides use the self-checking payload of `shoal-peer` (clock, time, checksum, pattern), so each side checks
//! the other's bytes; the clock in the payload must equal the sample's clock, which shows order and no loss.

mod support;

use std::time::Duration;

use support::{Peer, ecal_python, finish_transfer, publisher_to_ecal, topic, write_ini};

/// eCAL publisher (eCAL's default layers) → shoal subscriber that disables eCAL shared memory, so the eCAL
/// publisher must start its UDP writer for it.
fn ecal_to_shoal(name: &str, count: u64, size: usize, rate: f64) {
    ecal_python(); // the venv first (made on first use), before any peer's timers run
    let ini = write_ini("ecal_udp_sub", "[subscriber]\nshm_rec_enabled = false\n");
    let t = topic(&format!("ecal_{name}"));
    let sub = Peer::subscriber(&t, count).idle_ms(10000).ini(&ini).spawn_ready("shoal sub");
    let publ = Peer::ecal_publisher(&t, count, size, rate).arg("--type-name", "ecal.test.Pattern").spawn("eCAL pub");
    let ready = publ.expect("ready", Duration::from_secs(15));
    eprintln!("{name}: eCAL publisher {ready}");
    finish_transfer(name, publ, sub, count);
}

/// shoal publisher → eCAL subscriber with only UDP enabled.
fn shoal_to_ecal(name: &str, count: u64, size: usize, rate: f64) {
    shoal_to_ecal_in(name, count, size, rate, None);
}

/// [`shoal_to_ecal`] with the shoal publisher on this `ecal.ini`.
fn shoal_to_ecal_in(name: &str, count: u64, size: usize, rate: f64, ini: Option<&str>) {
    ecal_python(); // the venv first (made on first use), before any peer's timers run
    let t = topic(&format!("ecal_{name}"));
    let sub = Peer::ecal_subscriber(&t, count, "udp").timeout_ms(25000).idle_ms(10000).spawn_ready("eCAL sub");
    let mut publ = Peer::publisher(&t, count, size, rate).linger_ms(1500);
    if let Some(ini) = ini {
        publ = publ.ini(ini);
    }
    let msgs = publisher_to_ecal(name, publ.spawn("shoal pub"), sub, count);
    for m in &msgs {
        assert_eq!(m["pattern_clock"], m["send_clock"], "payload clock = sample clock: {m}");
        assert_eq!(m["size"], size);
    }
    // Type information comes from our registration, which eCAL applies by the time the last sample arrives.
    assert_eq!(msgs.last().expect("a message")["type_name"], "shoal.test.Pattern");
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

/// The shoal publisher's UDP data sent by its I/O thread (`sendmmsg` batches, GSO runs): eCAL receives the same
/// datagrams.
fn io_thread_ini() -> String {
    write_ini("ecal_udp_io_thread", "[shoal_network]\nsend_mode = io_thread\n")
}

#[test]
fn shoal_pub_sent_by_the_io_thread_to_ecal_sub() {
    shoal_to_ecal_in("udp_io", 200, 256, 200.0, Some(&io_thread_ini()));
}

#[test]
fn shoal_pub_sent_by_the_io_thread_to_ecal_sub_1mb_fragmented() {
    shoal_to_ecal_in("udp_io_1mb", 3, 1_000_000, 1.0, Some(&io_thread_ini()));
}
