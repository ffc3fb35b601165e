//! Interoperability with the real eCAL 6.1.1 (the `eclipse-ecal` wheel from PyPI), registration level.
//!
//! The eCAL side is played by the Python peers in `tools/tests/ecal/` (`monitor.py`, `pub.py`, `sub.py`), run with
//! the venv that `scripts/ecal-venv` creates in `target/ecal-venv` (the tests run the script themselves, so
//! `cargo test` works on a fresh clone; it needs PyPI once). The shoal side is `shoal-peer` and
//! `shoal-snapshot`. Every peer prints JSON lines; `support::Proc` collects them and stops its process on drop.
//!
//! All processes talk through the host's registration port 14000, like every eCAL process, so each test uses
//! topic names that contain the test binary's pid and the test name.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Proc, SNAPSHOT, TempPath, ecal_peer, shoal_peer, topic};

// ---------------------------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------------------------

fn shoal_snapshot(name: &str, args: &[&str]) -> Proc {
    let mut cmd = Command::new(SNAPSHOT);
    cmd.args(args);
    Proc::spawn(name, cmd)
}

/// eCAL's monitoring, streamed every 200 ms for `seconds`, restricted to topics containing `filter`.
fn ecal_monitor(filter: &str, seconds: u32) -> Proc {
    let m = ecal_peer(
        "monitor.py",
        "monitor.py",
        &["--seconds", &seconds.to_string(), "--interval-ms", "200", "--topic-contains", filter],
    );
    m.expect("ready", Duration::from_secs(20));
    m
}

/// shoal's snapshot, streamed every 200 ms for `seconds`, restricted to topics containing `filter`.
fn shoal_monitor(filter: &str, seconds: u32, extra: &[&str]) -> Proc {
    let ms = (seconds * 1000).to_string();
    let mut args =
        vec!["--wait-ms", "0", "--duration-ms", ms.as_str(), "--interval-ms", "200", "--topic-contains", filter];
    args.extend_from_slice(extra);
    let s = shoal_snapshot("shoal-snapshot (monitor)", &args);
    s.expect("ready", Duration::from_secs(10));
    s
}

fn is_snapshot(v: &Value) -> bool {
    v["event"] == "snapshot"
}

fn arr<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v[key].as_array().map(Vec::as_slice).unwrap_or(&[])
}

fn find(list: &[Value], pred: impl Fn(&Value) -> bool) -> Option<&Value> {
    list.iter().find(|v| pred(v))
}

fn pid_is(v: &Value, pid: u32) -> bool {
    v["pid"].as_u64() == Some(u64::from(pid))
}

/// Host name as the shoal node announces it (`gethostname`), from a shoal peer's "ready" line.
fn host_of(ready: &Value) -> String {
    ready["host_name"].as_str().expect("ready line has host_name").to_string()
}

const DISCOVERY: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------------------------

/// (a) eCAL's monitoring lists shoal processes, publishers and subscribers with the right identity and type.
#[test]
fn shoal_is_visible_in_ecal_monitoring() {
    let t = topic("visible");
    let t_typed = format!("{t}_typed");
    let publ = shoal_peer(
        "shoal-peer pub",
        &["pub", "--topic", &t, "--wait-subs", "0", "--count", "0", "--rate", "100"],
        None,
    );
    let sub =
        shoal_peer("shoal-peer sub", &["sub", "--topic", &t, "--count", "1000000000", "--idle-ms", "60000"], None);
    // A typed shoal subscriber (shoal-peer's subscriber announces no type), with a binary descriptor.
    let desc_hex = "000102ff7f80fe0a";
    let typed = shoal_snapshot(
        "shoal-snapshot (typed sub)",
        &[
            "--subscribe",
            &t_typed,
            "--type-name",
            "shoal.test.Typed",
            "--encoding",
            "proto",
            "--descriptor-hex",
            desc_hex,
            "--wait-ms",
            "60000",
        ],
    );
    let pub_ready = publ.expect("ready", Duration::from_secs(10));
    sub.expect("ready", Duration::from_secs(10));
    let typed_ready = typed.expect("ready", Duration::from_secs(10));
    let host = host_of(&typed_ready);
    let pub_id = pub_ready["publisher_id"].as_u64().expect("publisher_id");
    let (pub_pid, sub_pid, typed_pid) = (publ.pid(), sub.pid(), typed.pid());

    let mon = ecal_monitor(&t, 30);
    let snap = mon.expect_line("the shoal processes and topics", DISCOVERY, |v| {
        is_snapshot(v)
            && [pub_pid, sub_pid, typed_pid].iter().all(|&p| find(arr(v, "processes"), |x| pid_is(x, p)).is_some())
            && find(arr(v, "publishers"), |x| pid_is(x, pub_pid)).is_some()
            && find(arr(v, "subscribers"), |x| pid_is(x, sub_pid)).is_some()
            && find(arr(v, "subscribers"), |x| pid_is(x, typed_pid)).is_some()
    });

    for (pid, unit) in [(pub_pid, "shoal-peer"), (sub_pid, "shoal-peer"), (typed_pid, "shoal-snapshot")] {
        let p = find(arr(&snap, "processes"), |x| pid_is(x, pid)).expect("listed");
        assert_eq!(p["host_name"], host.as_str(), "process host name: {p}");
        assert_eq!(p["unit_name"], unit, "unit name: {p}");
        assert_eq!(p["shm_transport_domain"], host.as_str(), "shm transport domain: {p}");
        assert!(p["process_name"].as_str().unwrap_or("").ends_with(unit), "process name: {p}");
        assert!(p["process_parameter"].as_str().unwrap_or("").contains(&t), "command line: {p}");
        assert!(p["ecal_runtime_version"].as_str().unwrap_or("").contains("shoal"), "runtime version: {p}");
        assert_eq!(p["component_init_state"], 3, "component flags: {p}");
        assert_eq!(p["component_init_info"], "pub|sub", "component flags: {p}");
        assert_eq!(p["state_severity_level"], 1, "state: {p}");
    }

    let p = find(arr(&snap, "publishers"), |x| pid_is(x, pub_pid)).expect("listed");
    assert_eq!(p["topic_name"], t.as_str());
    assert_eq!(p["direction"], "publisher");
    assert_eq!(p["topic_id"].as_u64(), Some(pub_id), "eCAL's topic id is shoal's entity id: {p}");
    assert_eq!(p["host_name"], host.as_str());
    assert_eq!(p["unit_name"], "shoal-peer");
    assert_eq!(p["shm_transport_domain"], host.as_str());
    assert_eq!(p["datatype"]["name"], "shoal.test.Pattern", "{p}");
    assert_eq!(p["datatype"]["encoding"], "raw", "{p}");
    assert_eq!(p["datatype"]["descriptor_len"], 0, "{p}");
    assert_eq!(p["topic_size"], 64, "shoal-peer's default payload size: {p}");

    let s = find(arr(&snap, "subscribers"), |x| pid_is(x, sub_pid)).expect("listed");
    assert_eq!(s["topic_name"], t.as_str());
    assert_eq!(s["direction"], "subscriber");
    assert_eq!(s["host_name"], host.as_str());
    assert_eq!(s["datatype"]["name"], "", "shoal-peer's subscriber announces no type: {s}");

    let s = find(arr(&snap, "subscribers"), |x| pid_is(x, typed_pid)).expect("listed");
    assert_eq!(s["topic_name"], t_typed.as_str());
    assert_eq!(s["datatype"]["name"], "shoal.test.Typed", "{s}");
    assert_eq!(s["datatype"]["encoding"], "proto", "{s}");
    assert_eq!(s["datatype"]["descriptor_hex"], desc_hex, "descriptor bytes: {s}");

    // The shoal publisher and subscriber find each other, and eCAL sees the statistics they announce.
    mon.expect_line("shoal publisher statistics (connections_local 1, data_clock > 0)", DISCOVERY, |v| {
        is_snapshot(v)
            && find(arr(v, "publishers"), |x| {
                pid_is(x, pub_pid) && x["connections_local"] == 1 && x["data_clock"].as_i64().unwrap_or(0) > 0
            })
            .is_some()
    });
    // The subscriber's frequency and latency, as eCAL 6.1.1's own monitoring holds them (the serialized
    // monitoring's data_latency_us: the binding's Topic objects do not expose it).
    let v = mon.expect_line("shoal subscriber frequency and latency", DISCOVERY, |v| {
        is_snapshot(v)
            && find(arr(v, "subscribers"), |x| {
                pid_is(x, sub_pid)
                    && x["data_frequency"].as_i64().unwrap_or(0) > 0
                    && x["data_latency_us"]["count"].as_u64().unwrap_or(0) > 0
            })
            .is_some()
    });
    let s = find(arr(&v, "subscribers"), |x| pid_is(x, sub_pid)).expect("listed");
    let lat = &s["data_latency_us"];
    let (min, mean, max) = (lat["min"].as_f64(), lat["mean"].as_f64(), lat["max"].as_f64());
    assert!(matches!((min, mean, max), (Some(a), Some(m), Some(b)) if 0.0 <= a && a <= m && m <= b && b < 1e6), "{s}");
    // 100 Hz, announced in mHz.
    assert!((50_000..200_000).contains(&s["data_frequency"].as_i64().unwrap_or(0)), "{s}");
}

/// (b) shoal's snapshot lists eCAL processes, publishers and subscribers exactly as eCAL announced them.
#[test]
fn ecal_is_visible_in_shoal_snapshot() {
    let t = topic("ecal_seen");
    let (t_pub, t_sub) = (format!("{t}_pub"), format!("{t}_sub"));
    let pub_desc = "00ff0102fe7f80";
    let sub_desc = "0a0b0c";
    let epub = ecal_peer(
        "pub.py",
        "pub.py",
        &[
            "--topic",
            &t_pub,
            "--count",
            "0",
            "--rate",
            "20",
            "--layer",
            "udp",
            "--type-name",
            "ecal.test.Pub",
            "--encoding",
            "raw",
            "--descriptor-hex",
            pub_desc,
            "--unit",
            "ecal_interop_pub",
        ],
    );
    let esub = ecal_peer(
        "sub.py",
        "sub.py",
        &[
            "--topic",
            &t_sub,
            "--count",
            "0",
            "--timeout-ms",
            "60000",
            "--layer",
            "shm",
            "--type-name",
            "ecal.test.Sub",
            "--encoding",
            "proto",
            "--descriptor-hex",
            sub_desc,
            "--unit",
            "ecal_interop_sub",
        ],
    );
    let pub_ready = epub.expect("ready", Duration::from_secs(20));
    let sub_ready = esub.expect("ready", Duration::from_secs(20));
    assert_eq!(pub_ready["datatype"]["descriptor_hex"], pub_desc, "pub.py announces the descriptor given");
    let (pub_pid, sub_pid) = (epub.pid(), esub.pid());

    let shoal = shoal_monitor(&t, 30, &[]);
    let snap = shoal.expect_line("the eCAL peers", DISCOVERY, |v| {
        is_snapshot(v)
            && find(arr(v, "processes"), |x| pid_is(x, pub_pid)).is_some()
            && find(arr(v, "processes"), |x| pid_is(x, sub_pid)).is_some()
            && find(arr(v, "topics"), |x| pid_is(x, pub_pid)).is_some()
            && find(arr(v, "topics"), |x| pid_is(x, sub_pid)).is_some()
    });
    let host = host_of(&snap);
    assert_eq!(pub_ready["host_name"], host.as_str(), "eCAL and shoal agree on the host name");

    for (pid, unit) in [(pub_pid, "ecal_interop_pub"), (sub_pid, "ecal_interop_sub")] {
        let p = find(arr(&snap, "processes"), |x| pid_is(x, pid)).expect("listed");
        assert_eq!(p["host_name"], host.as_str(), "{p}");
        assert_eq!(p["unit_name"], unit, "{p}");
        assert_eq!(p["runtime_version"], "v6.1.1", "{p}");
        assert_eq!(p["is_self"], false, "{p}");
    }
    let me = find(arr(&snap, "processes"), |x| x["is_self"] == true).expect("shoal lists itself");
    assert!(pid_is(me, shoal.pid()), "{me}");

    let p = find(arr(&snap, "topics"), |x| pid_is(x, pub_pid)).expect("listed");
    assert_eq!(p["topic_name"], t_pub.as_str(), "{p}");
    assert_eq!(p["direction"], "publisher", "{p}");
    assert_eq!(p["entity_id"], pub_ready["topic_id"], "entity id = eCAL's topic id: {p}");
    assert_eq!(p["host_name"], host.as_str(), "{p}");
    assert_eq!(p["unit_name"], "ecal_interop_pub", "{p}");
    assert_eq!(p["datatype"]["name"], "ecal.test.Pub", "{p}");
    assert_eq!(p["datatype"]["encoding"], "raw", "{p}");
    assert_eq!(p["datatype"]["descriptor_hex"], pub_desc, "{p}");

    let s = find(arr(&snap, "topics"), |x| pid_is(x, sub_pid)).expect("listed");
    assert_eq!(s["topic_name"], t_sub.as_str(), "{s}");
    assert_eq!(s["direction"], "subscriber", "{s}");
    assert_eq!(s["entity_id"], sub_ready["topic_id"], "{s}");
    assert_eq!(s["datatype"]["name"], "ecal.test.Sub", "{s}");
    assert_eq!(s["datatype"]["encoding"], "proto", "{s}");
    assert_eq!(s["datatype"]["descriptor_hex"], sub_desc, "{s}");
    // The eCAL subscriber registers udp (disabled), shm (enabled), tcp (disabled): shoal lists the enabled one.
    assert_eq!(s["layers"], serde_json::json!(["shm"]), "enabled layers of the SHM-only eCAL subscriber: {s}");

    // eCAL's publisher statistics arrive too (it sends at 20 Hz even without subscribers).
    shoal.expect_line("the eCAL publisher's data_clock above 0", DISCOVERY, |v| {
        is_snapshot(v)
            && find(arr(v, "topics"), |x| pid_is(x, pub_pid) && x["data_clock"].as_i64().unwrap_or(0) > 0).is_some()
    });
}

/// Registration samples larger than one datagram (a 150 kB type descriptor: ecaludp fragmentation) in both
/// directions, compared by digest.
#[test]
fn large_type_descriptor_crosses_both_ways() {
    let t = topic("bigdesc");
    let (t_shoal, t_ecal) = (format!("{t}_from_shoal"), format!("{t}_from_ecal"));
    let desc: Vec<u8> = (0..150_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let digest = format!("{:016x}", shoal_tools::fnv1a64(&desc));
    let file = TempPath::new("interop_bigdesc.bin");
    std::fs::write(&file, &desc).expect("write temp file");

    let shoal = shoal_snapshot(
        "shoal-snapshot (big publisher)",
        &[
            "--publish",
            &t_shoal,
            "--type-name",
            "big.FromShoal",
            "--encoding",
            "proto",
            "--descriptor-file",
            file.as_str(),
            "--wait-ms",
            "0",
            "--duration-ms",
            "30000",
            "--interval-ms",
            "200",
            "--topic-contains",
            &t,
        ],
    );
    shoal.expect("ready", Duration::from_secs(10));
    let epub = ecal_peer(
        "pub.py",
        "pub.py",
        &[
            "--topic",
            &t_ecal,
            "--count",
            "0",
            "--rate",
            "5",
            "--type-name",
            "big.FromEcal",
            "--encoding",
            "proto",
            "--descriptor-file",
            file.as_str(),
        ],
    );
    epub.expect("ready", Duration::from_secs(20));
    let (shoal_pid, ecal_pid) = (shoal.pid(), epub.pid());
    let mon = ecal_monitor(&t, 30);

    let big = |x: &Value, pid: u32, name: &str| {
        pid_is(x, pid) && x["datatype"]["name"] == name && x["datatype"]["descriptor_len"] == 150_000
    };
    let seen_by_ecal = mon.expect_line("shoal's publisher with its 150 kB descriptor", DISCOVERY, |v| {
        is_snapshot(v) && find(arr(v, "publishers"), |x| big(x, shoal_pid, "big.FromShoal")).is_some()
    });
    let p = find(arr(&seen_by_ecal, "publishers"), |x| pid_is(x, shoal_pid)).expect("listed");
    assert_eq!(p["datatype"]["descriptor_digest"], digest.as_str(), "descriptor bytes as eCAL got them");

    let seen_by_shoal = shoal.expect_line("eCAL's publisher with its 150 kB descriptor", DISCOVERY, |v| {
        is_snapshot(v) && find(arr(v, "topics"), |x| big(x, ecal_pid, "big.FromEcal")).is_some()
    });
    let p = find(arr(&seen_by_shoal, "topics"), |x| pid_is(x, ecal_pid)).expect("listed");
    assert_eq!(p["datatype"]["descriptor_digest"], digest.as_str(), "descriptor bytes as shoal got them");
}

/// (c) A shoal process that exits cleanly unregisters: eCAL's monitoring drops its process, publisher and
/// subscriber at once, not after the 10 s registration timeout. A killed shoal process (control) stays listed.
#[test]
fn shoal_unregistration_reaches_ecal() {
    let t = topic("unreg");
    let clean_topic = format!("{t}_clean");
    let killed_topic = format!("{t}_killed");
    let entity_args = |topic: &'static str, tn: &str| -> Vec<String> {
        vec![
            "--publish".into(),
            tn.into(),
            "--subscribe".into(),
            tn.into(),
            "--type-name".into(),
            topic.into(),
            "--encoding".into(),
            "raw".into(),
            "--wait-ms".into(),
            "60000".into(),
        ]
    };
    let clean_args = entity_args("shoal.test.Clean", &clean_topic);
    let killed_args = entity_args("shoal.test.Killed", &killed_topic);
    let mut clean =
        shoal_snapshot("shoal-snapshot (clean exit)", &clean_args.iter().map(String::as_str).collect::<Vec<_>>());
    let mut killed =
        shoal_snapshot("shoal-snapshot (killed)", &killed_args.iter().map(String::as_str).collect::<Vec<_>>());
    clean.expect("ready", Duration::from_secs(10));
    killed.expect("ready", Duration::from_secs(10));
    let (clean_pid, killed_pid) = (clean.pid(), killed.pid());

    let listed = |v: &Value, pid: u32| {
        find(arr(v, "processes"), |x| pid_is(x, pid)).is_some()
            && find(arr(v, "publishers"), |x| pid_is(x, pid)).is_some()
            && find(arr(v, "subscribers"), |x| pid_is(x, pid)).is_some()
    };
    let gone = |v: &Value, pid: u32| {
        find(arr(v, "processes"), |x| pid_is(x, pid)).is_none()
            && find(arr(v, "publishers"), |x| pid_is(x, pid)).is_none()
            && find(arr(v, "subscribers"), |x| pid_is(x, pid)).is_none()
    };
    let mon = ecal_monitor(&t, 40);
    mon.expect_line("both shoal processes with their entities", DISCOVERY, |v| {
        is_snapshot(v) && listed(v, clean_pid) && listed(v, killed_pid)
    });

    // Clean exit (SIGTERM: shoal-snapshot drops its node) versus SIGKILL, at the same moment.
    clean.signal(libc::SIGTERM);
    killed.signal(libc::SIGKILL);
    let stopped = Instant::now();
    clean.wait_success(Duration::from_secs(5));
    killed.wait_exit(Duration::from_secs(5)).expect("killed");

    let dropped = mon.expect_line(
        "the cleanly exited shoal process gone (unregistration applied)",
        Duration::from_secs(5),
        |v| is_snapshot(v) && gone(v, clean_pid),
    );
    let after = stopped.elapsed();
    assert!(after < Duration::from_secs(5), "unregistration took {after:?}");
    assert!(
        listed(&dropped, killed_pid),
        "the killed process must still be listed when the clean one is gone: {dropped}"
    );

    // The killed one is only dropped by eCAL's 10 s timeout: it is still there 4 s after the kill.
    let until = stopped + Duration::from_secs(4);
    while Instant::now() < until {
        let v = mon.expect_line("a snapshot", Duration::from_secs(5), is_snapshot);
        if Instant::now() < until {
            assert!(listed(&v, killed_pid), "killed process vanished before eCAL's timeout: {v}");
        }
    }
}

/// (c, reverse) eCAL's unregistration samples reach shoal: a deleted eCAL publisher and subscriber leave shoal's
/// snapshot within about one registration period. (eCAL sends an entity's unregistration on the next registration
/// cycle, so the peers wait a little between deleting it and `finalize`; without that pause eCAL 6.1.1 often
/// stops its registration thread before the sample is out.)
#[test]
fn ecal_unregistration_reaches_shoal() {
    let t = topic("ecal_unreg");
    let shoal = shoal_monitor(&t, 40, &[]);
    let mut epub = ecal_peer(
        "pub.py",
        "pub.py",
        &["--topic", &t, "--count", "0", "--rate", "10", "--finalize-delay-ms", "2500", "--linger-ms", "0"],
    );
    let mut esub = ecal_peer(
        "sub.py",
        "sub.py",
        &["--topic", &t, "--count", "0", "--timeout-ms", "60000", "--quiet", "--finalize-delay-ms", "2500"],
    );
    epub.expect("ready", Duration::from_secs(20));
    esub.expect("ready", Duration::from_secs(20));
    let (pub_pid, sub_pid) = (epub.pid(), esub.pid());
    let has = |v: &Value, pid: u32| find(arr(v, "topics"), |x| pid_is(x, pid)).is_some();
    shoal.expect_line("the eCAL publisher and subscriber", DISCOVERY, |v| {
        is_snapshot(v) && has(v, pub_pid) && has(v, sub_pid)
    });

    // SIGTERM: the peers delete their entity ("deleted"), then wait before finalize.
    epub.signal(libc::SIGTERM);
    esub.signal(libc::SIGTERM);
    epub.expect("deleted", Duration::from_secs(5));
    esub.expect("deleted", Duration::from_secs(5));
    let deleted = Instant::now();
    shoal.expect_line("eCAL's deleted entities gone", Duration::from_secs(5), |v| {
        is_snapshot(v) && !has(v, pub_pid) && !has(v, sub_pid)
    });
    let after = deleted.elapsed();
    assert!(after < Duration::from_secs(5), "took {after:?}");
    epub.wait_success(Duration::from_secs(10));
    esub.wait_success(Duration::from_secs(10));
}

/// Process state both ways: a shoal process's `Node::set_state` is read by eCAL 6.1.1's monitoring API, and an eCAL
/// process's `process.set_state` by shoal's snapshot, severity, level and text alike.
#[test]
fn process_states_cross_both_ways() {
    let t = topic("state");
    let svc = format!("{t}_svc");
    let shoal = shoal_peer(
        "shoal-peer (critical)",
        &["--state", "critical:3:no camera", "serve", "--service", &svc, "--duration-ms", "60000"],
        None,
    );
    shoal.expect("ready", Duration::from_secs(10));
    let shoal_pid = shoal.pid();
    let ecal = ecal_peer(
        "monitor.py (warning)",
        "monitor.py",
        &["--seconds", "40", "--interval-ms", "200", "--topic-contains", &t, "--state", "warning:2:disk at 91%"],
    );
    ecal.expect("ready", Duration::from_secs(20));
    let ecal_pid = ecal.pid();

    let seen = ecal.expect_line("the shoal process's state in eCAL's monitoring", DISCOVERY, |v| {
        is_snapshot(v) && find(arr(v, "processes"), |x| pid_is(x, shoal_pid)).is_some()
    });
    let p = find(arr(&seen, "processes"), |x| pid_is(x, shoal_pid)).expect("listed");
    assert_eq!(p["state_severity"], 3, "eCAL reads shoal's severity: {p}");
    assert_eq!(p["state_severity_level"], 3, "eCAL reads shoal's level: {p}");
    assert_eq!(p["state_info"], "no camera", "eCAL reads shoal's text: {p}");

    let mon = shoal_monitor(&t, 30, &[]);
    let seen = mon.expect_line("the eCAL process's state in shoal's snapshot", DISCOVERY, |v| {
        is_snapshot(v) && find(arr(v, "processes"), |x| pid_is(x, ecal_pid)).is_some()
    });
    let p = find(arr(&seen, "processes"), |x| pid_is(x, ecal_pid)).expect("listed");
    assert_eq!(p["state_severity"], 2, "shoal reads eCAL's severity: {p}");
    assert_eq!(p["state_severity_level"], 2, "shoal reads eCAL's level: {p}");
    assert_eq!(p["state_info"], "disk at 91%", "shoal reads eCAL's text: {p}");
    assert_eq!(p["state"], "warning (level 2): disk at 91%", "and shows it as every shoal tool does: {p}");
    let own = find(arr(&seen, "processes"), |x| pid_is(x, shoal_pid)).expect("the shoal peer too");
    assert_eq!(own["state"], "critical (level 3): no camera", "{own}");
}
