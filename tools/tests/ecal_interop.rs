//! Interoperability with the real eCAL 6.1.1 (the `eclipse-ecal` wheel from PyPI), registration level.
//!
//! The eCAL side is played by the Python peers in `tools/tests/ecal/` (`monitor.py`, `pub.py`, `sub.py`,
//! `sniff.py`), run with the venv that `scripts/ecal-venv` creates in `target/ecal-venv` (the tests run the script
//! themselves, so `cargo test` works on a fresh clone; it needs PyPI once). The shoal side is `shoal-peer` and
//! `shoal-snapshot`. Every peer prints JSON lines; [`Peer`] collects them and kills its process on drop.
//!
//! All processes talk through the host's registration port 14000, like every eCAL process, so each test uses
//! topic names that contain the test binary's pid and the test name.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

// ---------------------------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------------------------

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tools/ has a parent").to_path_buf()
}

fn peer_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ecal").join(name)
}

/// The venv's python, created by `scripts/ecal-venv` on first use (once per test binary).
fn ecal_python() -> &'static Path {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = PYTHON.get_or_init(|| {
        let script = repo_root().join("scripts/ecal-venv");
        let out = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(format!("{} failed ({}):\n{stderr}", script.display(), out.status));
        }
        let python = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
        if !python.is_file() {
            return Err(format!("{} printed no python path:\n{stdout}\n{stderr}", script.display()));
        }
        Ok(python)
    });
    match r {
        Ok(p) => p,
        Err(e) => panic!("the eCAL 6.1.1 Python environment is not available: {e}"),
    }
}

/// A unique topic name for this test binary and test.
fn topic(test: &str) -> String {
    format!("shoal_interop_{}_{test}", std::process::id())
}

/// A child process printing JSON lines on stdout; killed (and reaped) on drop.
struct Peer {
    name: String,
    child: Child,
    lines: Receiver<Value>,
    seen: Vec<Value>,
    stderr: Arc<Mutex<String>>,
    /// A shoal process: after killing it, remove the shared-memory files it could not.
    shoal: bool,
}

impl Peer {
    fn spawn(name: &str, program: &Path, args: &[&str]) -> Peer {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("RUST_LOG", "warn")
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({}): {e}", program.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut err_pipe = child.stderr.take().expect("piped stderr");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // Only JSON objects are ours; anything else (a stray log line) is ignored.
                if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
                s.push_str(&String::from_utf8_lossy(&buf[..n]));
                if s.len() > 64 * 1024 {
                    let cut = s.len() - 32 * 1024;
                    let cut = (cut..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(s.len());
                    s.drain(..cut);
                }
            }
        });
        Peer { name: name.to_string(), child, lines, seen: Vec::new(), stderr, shoal: false }
    }

    /// An eCAL peer script run by the venv's python.
    fn python(name: &str, script: &str, args: &[&str]) -> Peer {
        let script = peer_script(script);
        let mut all = vec![script.to_str().expect("UTF-8 path")];
        all.extend_from_slice(args);
        Peer::spawn(name, ecal_python(), &all)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line satisfying `pred` within `timeout`; None on timeout or when the process ended.
    fn wait_for(&mut self, timeout: Duration, mut pred: impl FnMut(&Value) -> bool) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if self.seen.len() > 50 {
                        self.seen.remove(0);
                    }
                    if pred(&v) {
                        return Some(v);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Like [`wait_for`](Self::wait_for), but fails the test with the peer's output when nothing matches.
    fn expect(&mut self, what: &str, timeout: Duration, pred: impl FnMut(&Value) -> bool) -> Value {
        match self.wait_for(timeout, pred) {
            Some(v) => v,
            None => panic!("{}: no line with {what} within {timeout:?}\n{}", self.name, self.report()),
        }
    }

    fn event(&mut self, event: &str, timeout: Duration) -> Value {
        self.expect(&format!("event {event:?}"), timeout, |v| v["event"] == event)
    }

    /// Last lines seen and stderr, for failure messages.
    fn report(&self) -> String {
        let last: Vec<String> = self.seen.iter().rev().take(3).map(|v| truncate(&v.to_string(), 3000)).collect();
        let err = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        format!("last lines (newest first):\n{}\nstderr (tail):\n{}", last.join("\n"), tail(&err, 3000))
    }

    fn signal(&self, sig: libc::c_int) {
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else { return };
        // SAFETY: plain kill(2) on our own child's pid; the child is not reaped yet (we hold it), so the pid
        // cannot have been reused.
        unsafe { libc::kill(pid, sig) };
    }

    /// Waits for the process to exit.
    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // Give it the chance of a clean exit (shm files, unregistration), then insist.
            self.signal(libc::SIGTERM);
            if self.wait_exit(Duration::from_secs(3)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        if self.shoal {
            // A shoal process that did not exit cleanly leaves its ring and doorbell: remove those of dead processes.
            let _ = shoal::transport::shm_ring::remove_stale_segments(Path::new(shoal::transport::shm_ring::SHM_DIR));
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let end = (0..=n).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    format!("{}…", &s[..end])
}

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..=s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(s.len());
    &s[start..]
}

fn shoal_peer(name: &str, args: &[&str]) -> Peer {
    let mut p = Peer::spawn(name, Path::new(env!("CARGO_BIN_EXE_shoal-peer")), args);
    p.shoal = true;
    p
}

fn shoal_snapshot(name: &str, args: &[&str]) -> Peer {
    let mut p = Peer::spawn(name, Path::new(env!("CARGO_BIN_EXE_shoal-snapshot")), args);
    p.shoal = true;
    p
}

/// eCAL's monitoring, streamed every 200 ms for `seconds`, restricted to topics containing `filter`.
fn ecal_monitor(filter: &str, seconds: u32) -> Peer {
    let mut m = Peer::python(
        "monitor.py",
        "monitor.py",
        &["--seconds", &seconds.to_string(), "--interval-ms", "200", "--topic-contains", filter],
    );
    m.event("ready", Duration::from_secs(20));
    m
}

/// shoal's snapshot, streamed every 200 ms for `seconds`, restricted to topics containing `filter`.
fn shoal_monitor(filter: &str, seconds: u32, extra: &[&str]) -> Peer {
    let ms = (seconds * 1000).to_string();
    let mut args =
        vec!["--wait-ms", "0", "--duration-ms", ms.as_str(), "--interval-ms", "200", "--topic-contains", filter];
    args.extend_from_slice(extra);
    let mut s = shoal_snapshot("shoal-snapshot (monitor)", &args);
    s.event("ready", Duration::from_secs(10));
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

fn fnv1a64_hex(data: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A temporary file removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn with_bytes(tag: &str, bytes: &[u8]) -> TempFile {
        let p = std::env::temp_dir().join(format!("shoal_interop_{}_{tag}", std::process::id()));
        std::fs::write(&p, bytes).expect("write temp file");
        TempFile(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("UTF-8 temp path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
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
    let mut publ =
        shoal_peer("shoal-peer pub", &["pub", "--topic", &t, "--wait-subs", "0", "--count", "0", "--rate", "100"]);
    let mut sub = shoal_peer("shoal-peer sub", &["sub", "--topic", &t, "--count", "1000000000", "--idle-ms", "60000"]);
    // A typed shoal subscriber (shoal-peer's subscriber announces no type), with a binary descriptor.
    let desc_hex = "000102ff7f80fe0a";
    let mut typed = shoal_snapshot(
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
    let pub_ready = publ.event("ready", Duration::from_secs(10));
    sub.event("ready", Duration::from_secs(10));
    let typed_ready = typed.event("ready", Duration::from_secs(10));
    let host = host_of(&typed_ready);
    let pub_id = pub_ready["publisher_id"].as_u64().expect("publisher_id");
    let (pub_pid, sub_pid, typed_pid) = (publ.pid(), sub.pid(), typed.pid());

    let mut mon = ecal_monitor(&t, 30);
    let snap = mon.wait_for(DISCOVERY, |v| {
        is_snapshot(v)
            && [pub_pid, sub_pid, typed_pid].iter().all(|&p| find(arr(v, "processes"), |x| pid_is(x, p)).is_some())
            && find(arr(v, "publishers"), |x| pid_is(x, pub_pid)).is_some()
            && find(arr(v, "subscribers"), |x| pid_is(x, sub_pid)).is_some()
            && find(arr(v, "subscribers"), |x| pid_is(x, typed_pid)).is_some()
    });
    let Some(snap) = snap else {
        panic!("eCAL's monitoring did not list the shoal processes and topics within {DISCOVERY:?}\n{}", mon.report())
    };

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
    let snap = mon.wait_for(DISCOVERY, |v| {
        is_snapshot(v)
            && find(arr(v, "publishers"), |x| {
                pid_is(x, pub_pid) && x["connections_local"] == 1 && x["data_clock"].as_i64().unwrap_or(0) > 0
            })
            .is_some()
    });
    assert!(
        snap.is_some(),
        "shoal publisher statistics (connections_local 1, data_clock > 0) not seen\n{}",
        mon.report()
    );
}

/// (b) shoal's snapshot lists eCAL processes, publishers and subscribers exactly as eCAL announced them.
#[test]
fn ecal_is_visible_in_shoal_snapshot() {
    let t = topic("ecal_seen");
    let (t_pub, t_sub) = (format!("{t}_pub"), format!("{t}_sub"));
    let pub_desc = "00ff0102fe7f80";
    let sub_desc = "0a0b0c";
    let mut epub = Peer::python(
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
    let mut esub = Peer::python(
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
    let pub_ready = epub.event("ready", Duration::from_secs(20));
    let sub_ready = esub.event("ready", Duration::from_secs(20));
    assert_eq!(pub_ready["datatype"]["descriptor_hex"], pub_desc, "pub.py announces the descriptor given");
    let (pub_pid, sub_pid) = (epub.pid(), esub.pid());

    let mut shoal = shoal_monitor(&t, 30, &[]);
    let snap = shoal.wait_for(DISCOVERY, |v| {
        is_snapshot(v)
            && find(arr(v, "processes"), |x| pid_is(x, pub_pid)).is_some()
            && find(arr(v, "processes"), |x| pid_is(x, sub_pid)).is_some()
            && find(arr(v, "topics"), |x| pid_is(x, pub_pid)).is_some()
            && find(arr(v, "topics"), |x| pid_is(x, sub_pid)).is_some()
    });
    let Some(snap) = snap else {
        panic!("shoal's snapshot did not list the eCAL peers within {DISCOVERY:?}\n{}", shoal.report())
    };
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
    let stats = shoal.wait_for(DISCOVERY, |v| {
        is_snapshot(v)
            && find(arr(v, "topics"), |x| pid_is(x, pub_pid) && x["data_clock"].as_i64().unwrap_or(0) > 0).is_some()
    });
    assert!(stats.is_some(), "eCAL publisher's data_clock never above 0 in shoal's snapshot\n{}", shoal.report());
}

/// Registration samples larger than one datagram (a 150 kB type descriptor: ecaludp fragmentation) in both
/// directions, compared by digest.
#[test]
fn large_type_descriptor_crosses_both_ways() {
    let t = topic("bigdesc");
    let (t_shoal, t_ecal) = (format!("{t}_from_shoal"), format!("{t}_from_ecal"));
    let desc: Vec<u8> = (0..150_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let digest = fnv1a64_hex(&desc);
    let file = TempFile::with_bytes("bigdesc.bin", &desc);

    let mut shoal = shoal_snapshot(
        "shoal-snapshot (big publisher)",
        &[
            "--publish",
            &t_shoal,
            "--type-name",
            "big.FromShoal",
            "--encoding",
            "proto",
            "--descriptor-file",
            file.path(),
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
    shoal.event("ready", Duration::from_secs(10));
    let mut epub = Peer::python(
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
            file.path(),
        ],
    );
    epub.event("ready", Duration::from_secs(20));
    let (shoal_pid, ecal_pid) = (shoal.pid(), epub.pid());
    let mut mon = ecal_monitor(&t, 30);

    let big = |x: &Value, pid: u32, name: &str| {
        pid_is(x, pid) && x["datatype"]["name"] == name && x["datatype"]["descriptor_len"] == 150_000
    };
    let seen_by_ecal = mon.wait_for(DISCOVERY, |v| {
        is_snapshot(v) && find(arr(v, "publishers"), |x| big(x, shoal_pid, "big.FromShoal")).is_some()
    });
    let Some(seen_by_ecal) = seen_by_ecal else {
        panic!("eCAL did not list shoal's publisher with its 150 kB descriptor\n{}", mon.report())
    };
    let p = find(arr(&seen_by_ecal, "publishers"), |x| pid_is(x, shoal_pid)).expect("listed");
    assert_eq!(p["datatype"]["descriptor_digest"], digest.as_str(), "descriptor bytes as eCAL got them");

    let seen_by_shoal = shoal.wait_for(DISCOVERY, |v| {
        is_snapshot(v) && find(arr(v, "topics"), |x| big(x, ecal_pid, "big.FromEcal")).is_some()
    });
    let Some(seen_by_shoal) = seen_by_shoal else {
        panic!("shoal did not list eCAL's publisher with its 150 kB descriptor\n{}", shoal.report())
    };
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
    clean.event("ready", Duration::from_secs(10));
    killed.event("ready", Duration::from_secs(10));
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
    let mut mon = ecal_monitor(&t, 40);
    if mon.wait_for(DISCOVERY, |v| is_snapshot(v) && listed(v, clean_pid) && listed(v, killed_pid)).is_none() {
        panic!("eCAL did not list both shoal processes with their entities\n{}", mon.report());
    }

    // Clean exit (SIGTERM: shoal-snapshot drops its node) versus SIGKILL, at the same moment.
    clean.signal(libc::SIGTERM);
    killed.signal(libc::SIGKILL);
    let stopped = Instant::now();
    let status = clean.wait_exit(Duration::from_secs(5)).expect("shoal-snapshot exits on SIGTERM");
    assert!(status.success(), "clean exit: {status}\n{}", clean.report());
    killed.wait_exit(Duration::from_secs(5)).expect("killed");

    let dropped = mon.wait_for(Duration::from_secs(5), |v| is_snapshot(v) && gone(v, clean_pid));
    let after = stopped.elapsed();
    let Some(dropped) = dropped else {
        panic!(
            "eCAL still lists the cleanly exited shoal process 5 s later (unregistration not applied)\n{}",
            mon.report()
        )
    };
    assert!(after < Duration::from_secs(5), "unregistration took {after:?}");
    assert!(
        listed(&dropped, killed_pid),
        "the killed process must still be listed when the clean one is gone: {dropped}"
    );

    // The killed one is only dropped by eCAL's 10 s timeout: it is still there 4 s after the kill.
    let until = stopped + Duration::from_secs(4);
    while Instant::now() < until {
        let v = mon.expect("a snapshot", Duration::from_secs(5), is_snapshot);
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
    let mut shoal = shoal_monitor(&t, 40, &[]);
    let mut epub = Peer::python(
        "pub.py",
        "pub.py",
        &["--topic", &t, "--count", "0", "--rate", "10", "--finalize-delay-ms", "2500", "--linger-ms", "0"],
    );
    let mut esub = Peer::python(
        "sub.py",
        "sub.py",
        &["--topic", &t, "--count", "0", "--timeout-ms", "60000", "--quiet", "--finalize-delay-ms", "2500"],
    );
    epub.event("ready", Duration::from_secs(20));
    esub.event("ready", Duration::from_secs(20));
    let (pub_pid, sub_pid) = (epub.pid(), esub.pid());
    let has = |v: &Value, pid: u32| find(arr(v, "topics"), |x| pid_is(x, pid)).is_some();
    if shoal.wait_for(DISCOVERY, |v| is_snapshot(v) && has(v, pub_pid) && has(v, sub_pid)).is_none() {
        panic!("shoal did not list the eCAL publisher and subscriber\n{}", shoal.report());
    }

    // SIGTERM: the peers delete their entity ("deleted"), then wait before finalize.
    epub.signal(libc::SIGTERM);
    esub.signal(libc::SIGTERM);
    epub.event("deleted", Duration::from_secs(5));
    esub.event("deleted", Duration::from_secs(5));
    let deleted = Instant::now();
    let gone = shoal.wait_for(Duration::from_secs(5), |v| is_snapshot(v) && !has(v, pub_pid) && !has(v, sub_pid));
    let after = deleted.elapsed();
    assert!(gone.is_some(), "eCAL's deleted entities still in shoal's snapshot 5 s later\n{}", shoal.report());
    assert!(after < Duration::from_secs(5), "took {after:?}");
    for p in [&mut epub, &mut esub] {
        let status = p.wait_exit(Duration::from_secs(10)).expect("peer exits");
        assert!(status.success(), "{}: {status}\n{}", p.name, p.report());
    }
}
