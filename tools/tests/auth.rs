//! `[shoal_auth]` between real processes: shoal peers with the same key exchange a protected topic (over UDP and
//! over the native ring), peers with another key or none get nothing and their counters say why, a capture of
//! valid datagrams replayed is refused (as replayed while the receiver keeps the sender's window, as stale once
//! `max_age_ms` has passed), and an eCAL 6.1.1 peer still exchanges unprotected topics with a keyed shoal node.

mod support;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Proc, assert_clean_summary, ecal_peer, ecal_python, finish_transfer, shoal_peer, topic, write_ini};

/// A key file (mode 0600) in the test's temp directory.
fn key_file(name: &str, hex: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = format!("{}/{name}_{}.key", env!("CARGO_TARGET_TMPDIR"), std::process::id());
    std::fs::write(&path, format!("{hex}\n")).expect("write key file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod key file");
    path
}

const KEY_1: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const KEY_2: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/// UDP as the only path between shoal processes.
const UDP_ONLY: &str =
    "[shoal_shm_ring]\nenabled = false\n[publisher]\nuse_shm = false\n[subscriber]\nshm_rec_enabled = false\n";

fn ini(name: &str, layers: &str, auth: &str) -> String {
    write_ini(name, &format!("{layers}[shoal_auth]\n{auth}"))
}

fn summary_of(p: &Proc, timeout: Duration) -> Value {
    p.expect("summary", timeout)
}

/// The per-topic counters of a `shoal-peer sub` summary.
fn topic_counts<'a>(summary: &'a Value, t: &str) -> &'a Value {
    &summary["auth"]["topics"][t]
}

fn exchange_and_refuse(name: &str, layers: &str) {
    let k1 = key_file(&format!("{name}_k1"), KEY_1);
    let k2 = key_file(&format!("{name}_k2"), KEY_2);
    let with_k1 = ini(&format!("{name}_k1"), layers, &format!("key_file = {k1}\n"));
    let with_k2 = ini(&format!("{name}_k2"), layers, &format!("key_file = {k2}\n"));
    let no_key = write_ini(&format!("{name}_none"), layers);
    let t = topic(name);
    let count = 200u64;
    let good = shoal_peer("sub k1", &["sub", "--topic", &t, "--count", "200", "--idle-ms", "8000"], Some(&with_k1));
    let wrong = shoal_peer(
        "sub k2",
        &["sub", "--topic", &t, "--count", "1", "--idle-ms", "4000", "--first-ms", "4000"],
        Some(&with_k2),
    );
    let none = shoal_peer(
        "sub none",
        &["sub", "--topic", &t, "--count", "1", "--idle-ms", "4000", "--first-ms", "4000"],
        Some(&no_key),
    );
    for p in [&good, &wrong, &none] {
        p.expect("ready", Duration::from_secs(10));
    }
    let publ = shoal_peer(
        "pub k1",
        &["pub", "--topic", &t, "--count", "200", "--size", "64", "--rate", "400", "--wait-subs", "1"],
        Some(&with_k1),
    );
    let w = summary_of(&wrong, Duration::from_secs(20));
    let n = summary_of(&none, Duration::from_secs(20));
    finish_transfer(name, publ, good, count);
    eprintln!("{name}: other key {w}\n{name}: no key {n}");
    for (s, who) in [(&w, "other key"), (&n, "no key")] {
        assert_eq!(s["received"], 0, "{who} received nothing: {s}");
        assert_eq!(s["publishers"], 0, "{who} never matched the publisher: {s}");
    }
    assert_eq!(w["auth"]["enabled"], true);
    assert!(w["auth"]["registration"]["bad_tag"].as_u64() > Some(0), "registration refused as bad tag: {w}");
    assert_eq!(n["auth"]["enabled"], false);
    assert!(n["auth"]["registration"]["no_key"].as_u64() > Some(0), "registration refused, no key: {n}");
    assert_eq!(n["auth"]["registration"]["bad_tag"], 0, "{n}");
    if layers == UDP_ONLY {
        // The publisher's UDP datagrams reach every process on the port; they are refused there, on the topic.
        let wt = topic_counts(&w, &t);
        assert!(wt["bad_tag"].as_u64() > Some(0), "UDP data refused as bad tag on {t}: {w}");
        let nt = topic_counts(&n, &t);
        assert!(nt["no_key"].as_u64() > Some(0), "UDP data refused as no key on {t}: {n}");
    }
}

#[test]
fn same_key_exchanges_a_protected_topic_over_udp_others_get_nothing() {
    exchange_and_refuse("auth_udp", UDP_ONLY);
}

#[test]
fn same_key_exchanges_a_protected_topic_over_the_ring_others_get_nothing() {
    exchange_and_refuse("auth_ring", "");
}

/// Records, on a shared UDP port, the datagrams with the authentication envelope whose eCAL datagram inside is a
/// whole message named `name` (`None`: every enveloped datagram).
struct Recorder {
    stop: Arc<AtomicBool>,
    got: Arc<Mutex<Vec<Vec<u8>>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn inner_name(d: &[u8]) -> Option<&str> {
    // envelope header 32, ecaludp header 24, u16 name length (with the NUL), name, NUL.
    let inner = d.get(32..)?;
    if inner.get(0..4)? != b"ECAL" || u32::from_le_bytes(inner.get(8..12)?.try_into().ok()?) != 3 {
        return None;
    }
    let len = usize::from(u16::from_le_bytes(inner.get(24..26)?.try_into().ok()?));
    std::str::from_utf8(inner.get(26..26 + len.checked_sub(1)?)?).ok()
}

impl Recorder {
    fn start(port: u16, name: Option<String>) -> Recorder {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))
            .expect("socket");
        s.set_reuse_address(true).expect("SO_REUSEADDR");
        s.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)).into()).expect("bind the shared port");
        let sock: UdpSocket = s.into();
        sock.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
        let stop = Arc::new(AtomicBool::new(false));
        let got = Arc::new(Mutex::new(Vec::new()));
        let (stop2, got2) = (Arc::clone(&stop), Arc::clone(&got));
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !stop2.load(Ordering::Relaxed) {
                if let Ok((n, _)) = sock.recv_from(&mut buf) {
                    let d = &buf[..n];
                    let wanted = match &name {
                        Some(name) => inner_name(d) == Some(name.as_str()),
                        None => d.starts_with(b"SHOA"),
                    };
                    if d.starts_with(b"SHOA") && wanted {
                        got2.lock().expect("recorder").push(d.to_vec());
                    }
                }
            }
        });
        Recorder { stop, got, thread: Some(thread) }
    }

    fn finish(mut self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("recorder thread");
        }
        std::mem::take(&mut *self.got.lock().expect("recorder"))
    }
}

/// Sends the recorded datagrams again, to the local broadcast address the peers listen on.
fn replay(datagrams: &[Vec<u8>], port: u16) {
    let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("replay socket");
    sock.set_broadcast(true).expect("SO_BROADCAST");
    let to = SocketAddrV4::new(Ipv4Addr::new(127, 255, 255, 255), port);
    for d in datagrams {
        sock.send_to(d, to).expect("replay send");
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn replayed_captures_are_refused_as_replayed_then_as_stale() {
    let k1 = key_file("replay_k1", KEY_1);
    let with_k1 = ini("replay_k1", UDP_ONLY, &format!("key_file = {k1}\nmax_age_ms = 3000\n"));
    let t = topic("auth_replay");
    let data = Recorder::start(14002, Some(t.clone()));
    let reg = Recorder::start(14000, None);
    let count = 100u64;
    // The subscriber waits for more than is sent, so it is still there for the replay; it ends when idle.
    let sub = shoal_peer("sub", &["sub", "--topic", &t, "--count", "1000", "--idle-ms", "2500"], Some(&with_k1));
    sub.expect("ready", Duration::from_secs(10));
    let mut publ = shoal_peer(
        "pub",
        &["pub", "--topic", &t, "--count", "100", "--size", "64", "--rate", "500", "--wait-subs", "1"],
        Some(&with_k1),
    );
    let done = publ.expect("done", Duration::from_secs(20));
    assert_eq!(done["sent"], count, "{done}");
    std::thread::sleep(Duration::from_millis(100));
    let captured = data.finish();
    let captured_reg = reg.finish();
    assert!(captured.len() as u64 >= count * 9 / 10, "recorded {} of {count} data datagrams", captured.len());
    assert!(!captured_reg.is_empty(), "registration datagrams recorded");
    let replayed_at = Instant::now();
    replay(&captured, 14002);
    replay(&captured_reg, 14000);
    let s = summary_of(&sub, Duration::from_secs(20));
    eprintln!(
        "replay: {} data and {} registration datagrams resent; subscriber {s}",
        captured.len(),
        captured_reg.len()
    );
    assert_eq!(s["received"], count, "each message once, the replays not: {s}");
    assert_eq!(s["torn"], 0, "{s}");
    assert_eq!(s["out_of_order"], 0, "{s}");
    assert_eq!(topic_counts(&s, &t)["replayed"], captured.len() as u64, "every replayed data datagram: {s}");
    assert!(s["auth"]["registration"]["replayed"].as_u64() > Some(0), "replayed registration counted: {s}");
    publ.wait_success(Duration::from_secs(5));

    // A new subscriber has no window for that sender: the capture is refused by its age.
    let wait = Duration::from_millis(3300).saturating_sub(replayed_at.elapsed());
    std::thread::sleep(wait);
    let fresh = shoal_peer(
        "fresh sub",
        &["sub", "--topic", &t, "--count", "1", "--idle-ms", "1500", "--first-ms", "1500"],
        Some(&with_k1),
    );
    fresh.expect("ready", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    replay(&captured, 14002);
    let f = summary_of(&fresh, Duration::from_secs(20));
    eprintln!("stale replay: subscriber {f}");
    assert_eq!(f["received"], 0, "{f}");
    assert_eq!(topic_counts(&f, &t)["stale"], captured.len() as u64, "every replayed datagram refused as stale: {f}");
}

/// With the default `max_age_ms` (60 s), a capture replayed to a receiver that started after it was made (a
/// restarted subscriber, which has no replay window for the sender) is refused as stale although it is seconds old:
/// a receiver takes first contacts only from envelopes written after it started (less a 2 s clock allowance).
#[test]
fn a_capture_replayed_to_a_restarted_receiver_is_refused_with_the_default_max_age() {
    let k1 = key_file("restart_k1", KEY_1);
    let with_k1 = ini("restart_k1", UDP_ONLY, &format!("key_file = {k1}\n"));
    let t = topic("auth_restart");
    let data = Recorder::start(14002, Some(t.clone()));
    let count = 50u64;
    let count_s = count.to_string();
    let sub = shoal_peer("sub", &["sub", "--topic", &t, "--count", &count_s, "--idle-ms", "3000"], Some(&with_k1));
    sub.expect("ready", Duration::from_secs(10));
    let mut publ = shoal_peer(
        "pub",
        &["pub", "--topic", &t, "--count", &count_s, "--size", "64", "--rate", "500", "--wait-subs", "1"],
        Some(&with_k1),
    );
    publ.expect("done", Duration::from_secs(20));
    let s = summary_of(&sub, Duration::from_secs(20));
    assert_eq!(s["received"], count, "{s}");
    std::thread::sleep(Duration::from_millis(100));
    let captured = data.finish();
    let captured_at = Instant::now();
    assert!(captured.len() as u64 >= count * 9 / 10, "recorded {} of {count} data datagrams", captured.len());
    publ.wait_success(Duration::from_secs(5));
    // The subscriber restarts (a new process, a new replay guard) once the capture is older than the allowance.
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(captured_at.elapsed()));
    let restarted = shoal_peer(
        "restarted sub",
        &["sub", "--topic", &t, "--count", "1", "--idle-ms", "1500", "--first-ms", "1500"],
        Some(&with_k1),
    );
    restarted.expect("ready", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    replay(&captured, 14002);
    let r = summary_of(&restarted, Duration::from_secs(20));
    eprintln!("replay to a restarted receiver {:?} after the capture: {r}", captured_at.elapsed());
    assert!(captured_at.elapsed() < Duration::from_secs(30), "well within the default max_age of 60 s");
    assert_eq!(r["received"], 0, "nothing of the capture delivered: {r}");
    assert_eq!(topic_counts(&r, &t)["stale"], captured.len() as u64, "every replayed datagram refused as stale: {r}");
}

/// eCAL 6.1.1 publisher → keyed shoal subscriber on an unprotected topic (received), and on a protected one
/// (refused: eCAL's registration is unauthenticated); keyed shoal publisher → eCAL subscriber on an unprotected
/// topic.
#[test]
fn ecal_peers_keep_working_on_unprotected_topics_of_a_keyed_node() {
    ecal_python();
    let k1 = key_file("ecal_k1", KEY_1);
    // Our eCAL shared-memory writes wait for the eCAL reader's acknowledge, as eCAL's do for ours (`--ack-ms`):
    // without it a reader a message late on a loaded machine loses one, by eCAL's design.
    let keyed = ini(
        "ecal_keyed",
        "[publisher]\nmemfile_ack_timeout = 500\n",
        &format!("key_file = {k1}\nprotected_topics = test_secret_.*\n"),
    );
    let open = topic("auth_ecal_open");
    let secret = format!("test_secret_{}", std::process::id());
    let count = 50u64;

    // eCAL → shoal, unprotected and protected topic at once.
    let sub_open =
        shoal_peer("shoal sub open", &["sub", "--topic", &open, "--count", "50", "--idle-ms", "10000"], Some(&keyed));
    sub_open.expect("ready", Duration::from_secs(10));
    let ecal_pub = |t: &str, wait_subs: &str| {
        ecal_peer(
            "eCAL pub",
            "pub.py",
            // eCAL's shared memory drops a message its reader has not taken before the next write: with the
            // acknowledge the publisher waits for the reader, so a loaded machine loses nothing either.
            &[
                "--topic",
                t,
                "--count",
                "50",
                "--size",
                "128",
                "--rate",
                "100",
                "--wait-subs",
                wait_subs,
                "--wait-ms",
                "12000",
                "--ack-ms",
                "500",
            ],
        )
    };
    let pub_open = ecal_pub(&open, "1");
    // Never matched (its registration is refused): it stays registered for its 12 s wait, then gives up.
    let pub_secret = ecal_pub(&secret, "1");
    pub_open.expect("ready", Duration::from_secs(15));
    pub_secret.expect("ready", Duration::from_secs(15));
    // Started once the protected publisher is announcing (eCAL's start-up time varies with the load): it hears
    // several of its registration rounds within its 4 s.
    let sub_secret = shoal_peer(
        "shoal sub secret",
        &["sub", "--topic", &secret, "--count", "1", "--idle-ms", "4000", "--first-ms", "4000"],
        Some(&keyed),
    );
    let s = summary_of(&sub_secret, Duration::from_secs(30));
    finish_transfer("ecal_open", pub_open, sub_open, count);
    eprintln!("protected topic from eCAL: {s}");
    assert_eq!(s["received"], 0, "nothing from the unauthenticated eCAL publisher: {s}");
    assert!(topic_counts(&s, &secret)["unsigned"].as_u64() > Some(0), "its registration refused as unsigned: {s}");
    drop(pub_secret);

    // shoal (keyed) → eCAL, unprotected topic.
    let open2 = topic("auth_ecal_open2");
    let ecal_sub = ecal_peer(
        "eCAL sub",
        "sub.py",
        &["--topic", &open2, "--count", "50", "--timeout-ms", "25000", "--idle-ms", "10000"],
    );
    ecal_sub.expect("ready", Duration::from_secs(15));
    let publ = shoal_peer(
        "shoal pub",
        &[
            "pub",
            "--topic",
            &open2,
            "--count",
            "50",
            "--size",
            "128",
            "--rate",
            "100",
            "--wait-subs",
            "1",
            // The eCAL subscriber opens our memfile once our registration names it (CI saw it attach only after
            // the 50 messages): the first send waits a registration round beyond the match.
            "--start-delay-ms",
            "2000",
            "--linger-ms",
            "1500",
        ],
        Some(&keyed),
    );
    let ready = publ.expect("ready", Duration::from_secs(10));
    support::finish_transfer_to_ecal("ecal_open2", publ, ecal_sub, &ready, count);
    let _ = assert_clean_summary;
}
