//! Queues hold what users send: a subscriber process that pauses for one second while 8 MB messages arrive at 5 Hz,
//! then catches up, loses nothing with the default queue policy (16 messages of any size), over each layer
//! between two shoal processes: the native ring, eCAL shared memory (memfiles) and eCAL's UDP layer on loopback.
//! And queues count what their samples hold: a paused subscriber sent thousands of large UDP messages whose
//! payloads are tiny (the rest of each message is a long host name, or repeated records of a packed datagram)
//! keeps its memory within its queue's budget.

mod support;

use std::time::Duration;

use support::{assert_clean_summary, shoal_peer, topic, write_ini};

/// 8 MB (not MiB): the slot of a grown ring is the next power of two, 8 MiB.
const SIZE: usize = 8_000_000;
/// 2 s at 5 Hz: 2 messages, the pause (about 5 arrive meanwhile), then the rest.
const COUNT: u64 = 10;
const RATE: f64 = 5.0;

/// Held by the tests that send over UDP on the data port: the thin messages broadcast hundreds of MB, which would
/// fill the receive buffer of the other UDP test's subscriber in this binary (tests run in parallel threads).
static UDP_PORT: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn paused_transfer(name: &str, ini: Option<&str>) {
    let _udp = ini.is_some_and(|i| i.contains("queue_udp")).then(|| UDP_PORT.lock().unwrap_or_else(|e| e.into_inner()));
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

/// `VmRSS` and `VmHWM` of process `pid`, in kB.
fn rss_hwm_kb(pid: u64) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/<pid>/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .expect("a VmRSS / VmHWM line")
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The datagrams of one large message (`fat`) or packed datagram (`packed`) of `topic` whose delivered payload is
/// 32 bytes: an eCAL-format sample with a 150 KB host name (reassembled from 3 fragments), or a packed datagram of
/// one new record followed by 900 repeats of clock 1 (dropped as duplicates).
fn thin_message(kind: &str, topic: &str, clock: u64) -> Vec<Vec<u8>> {
    use shoal::wire::data_sample::{DataSampleRef, encode_data_sample};
    use shoal::wire::packed::{append_records, begin_packed, records_of};
    use shoal::wire::{DEFAULT_MAX_FRAGMENT_PAYLOAD, encode_message};
    let payload = shoal_tools::pattern_payload(clock, 32);
    match kind {
        "fat" => {
            let host = "h".repeat(150_000);
            let mut framed = Vec::new();
            encode_data_sample(
                &mut framed,
                &DataSampleRef {
                    topic_name: topic,
                    topic_id: "4343",
                    publisher_id: 4343,
                    host_name: &host,
                    clock,
                    time_us: 0,
                    payload: &payload,
                },
            );
            let mut id = clock as i32 * 10;
            encode_message(topic, &framed, DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || {
                id += 1;
                id
            })
            .expect("encode")
        }
        _ => {
            let mut d = Vec::new();
            begin_packed(&mut d, 4343, topic, clock, 0, &payload).expect("packs");
            let mut repeat = Vec::new();
            begin_packed(&mut repeat, 4343, topic, 1, 0, &[0u8; 32]).expect("packs");
            for _ in 0..900 {
                assert!(append_records(&mut d, records_of(&repeat), 1), "fits one datagram");
            }
            vec![d]
        }
    }
}

/// A subscriber paused after its first message while 2,000 thin messages (`thin_message`) arrive over UDP keeps
/// what its queue policy allows (16 messages, and older ones within 1 MiB) charged at what they hold: its memory
/// grows by a few MB, not by the 130-300 MB those messages pin when only their payloads are charged; the messages
/// beyond the policy are dropped and counted.
fn thin_messages_to_a_paused_subscriber(kind: &str) {
    let _udp = UDP_PORT.lock().unwrap_or_else(|e| e.into_inner());
    let t = topic(&format!("thin_{kind}"));
    let ini = write_ini(
        &format!("queue_thin_{kind}"),
        "[shoal_shm_ring]\nenabled = false\n[publisher]\nuse_shm = false\n[subscriber]\nshm_rec_enabled = false\n",
    );
    let mut sub = shoal_peer(
        "shoal sub",
        &["sub", "--topic", &t, "--count", "100000", "--idle-ms", "1000", "--pause-after", "1", "--pause-ms", "10000"],
        Some(&ini),
    );
    let pid = sub.expect("ready", Duration::from_secs(10))["pid"].as_u64().expect("pid");
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind");
    socket.set_broadcast(true).expect("broadcast");
    let send = |ds: &[Vec<u8>]| {
        for d in ds {
            socket.send_to(d, "127.255.255.255:14002").expect("send");
        }
    };
    // The first message makes the subscriber pause (the data socket opens with the subscriber; resent until it
    // arrives).
    let mut pause = None;
    for _ in 0..50 {
        send(&thin_message(kind, &t, 2));
        if let Some(p) = sub.wait_for(Duration::from_millis(200), |v| v["event"] == "pause") {
            pause = Some(p);
            break;
        }
    }
    assert!(pause.is_some(), "the subscriber got the first message");
    let paused_at = std::time::Instant::now();
    let (before, _) = rss_hwm_kb(pid);
    let count = 2000u64;
    for clock in 3..3 + count {
        send(&thin_message(kind, &t, clock));
        // ~150 KB a millisecond: well within what the receiver takes.
        std::thread::sleep(Duration::from_micros(if kind == "fat" { 1000 } else { 400 }));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (after, peak) = rss_hwm_kb(pid);
    let sent_in = paused_at.elapsed();
    assert!(sent_in < Duration::from_secs(9), "all sent while the subscriber paused (took {sent_in:?})");
    let summary = sub.expect("summary", Duration::from_secs(30));
    eprintln!(
        "thin {kind}: {count} messages to a paused subscriber in {sent_in:?}: RSS before {before} kB, after {after} \
         kB, peak {peak} kB; {summary}"
    );
    let received = summary["received"].as_u64().expect("received");
    let drops = summary["drops"].as_u64().expect("drops");
    assert!((17..100).contains(&received), "the queue kept its 16 and a few more: {summary}");
    assert!(drops >= count - received, "what the queue dropped is counted: {summary}");
    assert!(after.saturating_sub(before) < 40_000, "memory held within the queue's budget: {before} -> {after} kB");
    sub.wait_success(Duration::from_secs(5));
}

#[test]
fn a_paused_subscriber_of_thin_reassembled_messages_stays_within_its_queue_budget() {
    thin_messages_to_a_paused_subscriber("fat");
}

#[test]
fn a_paused_subscriber_of_thin_packed_datagrams_stays_within_its_queue_budget() {
    thin_messages_to_a_paused_subscriber("packed");
}
