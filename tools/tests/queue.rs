//! Queues hold what users send: a subscriber process that pauses for one second while 8 MB messages arrive at 5 Hz,
//! then catches up, loses nothing with the default queue policy (16 messages of any size), over each layer
//! between two shoal processes: the native ring, eCAL shared memory (memfiles) and eCAL's UDP layer on loopback.

mod support;

use std::time::Duration;

use support::{assert_clean_summary, shoal_peer, topic, write_ini};

/// 8 MB (not MiB): the slot of a grown ring is the next power of two, 8 MiB.
const SIZE: usize = 8_000_000;
/// 2 s at 5 Hz: 2 messages, the pause (about 5 arrive meanwhile), then the rest.
const COUNT: u64 = 10;
const RATE: f64 = 5.0;

fn paused_transfer(name: &str, ini: Option<&str>) {
    let t = topic(name);
    let count = COUNT.to_string();
    let mut sub = shoal_peer(
        "shoal sub",
        &["sub", "--topic", &t, "--count", &count, "--idle-ms", "10000", "--pause-after", "2", "--pause-ms", "1000"],
        ini,
    );
    sub.expect("ready", Duration::from_secs(10));
    let mut publ = shoal_peer(
        "shoal pub",
        &[
            "pub",
            "--topic",
            &t,
            "--count",
            &count,
            "--size",
            &SIZE.to_string(),
            "--rate",
            &RATE.to_string(),
            "--wait-subs",
            "1",
            "--linger-ms",
            "3000",
        ],
        ini,
    );
    let pause = sub.expect("pause", Duration::from_secs(20));
    let done = publ.expect("done", Duration::from_secs(30));
    assert_eq!(done["sent"], COUNT, "{done}");
    let summary = sub.expect("summary", Duration::from_secs(20));
    eprintln!("{name}: {pause}\n{name}: publisher {done}\n{name}: subscriber {summary}");
    assert_clean_summary(&summary, COUNT);
    sub.wait_success(Duration::from_secs(5));
    publ.wait_success(Duration::from_secs(10));
}

#[test]
fn a_paused_consumer_of_8_mb_messages_loses_nothing_over_the_native_ring() {
    paused_transfer("queue_ring", None);
}

#[test]
fn a_paused_consumer_of_8_mb_messages_loses_nothing_over_ecal_shared_memory() {
    let ini = write_ini("queue_ecal_shm", "[shoal_shm_ring]\nenabled = false\n[publisher]\nuse_udp_mc = false\n");
    paused_transfer("queue_ecal_shm", Some(&ini));
}

#[test]
fn a_paused_consumer_of_8_mb_messages_loses_nothing_over_udp() {
    let ini = write_ini(
        "queue_udp",
        "[shoal_shm_ring]\nenabled = false\n[publisher]\nuse_shm = false\n[subscriber]\nshm_rec_enabled = false\n",
    );
    paused_transfer("queue_udp", Some(&ini));
}
