//! Helpers shared by the multi-process tests (`multiprocess.rs`, `timing.rs`, `udp.rs`, `ecal_udp.rs`,
//! `udp_netns.rs`, `ecal_shm.rs`): child processes that print JSON lines, the eCAL 6.1.1 Python environment, and a
//! pair of network namespaces joined by a veth pair.

#![allow(dead_code)] // each test file uses a different subset

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `shoal-peer` binary.
pub(crate) const PEER: &str = env!("CARGO_BIN_EXE_shoal-peer");

/// The `shoal-snapshot` binary.
pub(crate) const SNAPSHOT: &str = env!("CARGO_BIN_EXE_shoal-snapshot");

/// The repository root.
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A topic name unique to this test process.
pub(crate) fn topic(name: &str) -> String {
    format!("test_udp_{name}_{}", std::process::id())
}

/// Writes an `ecal.ini` for the peers into the test's temp directory and returns its path.
pub(crate) fn write_ini(name: &str, text: &str) -> String {
    let path = format!("{}/{name}_{}.ini", env!("CARGO_TARGET_TMPDIR"), std::process::id());
    std::fs::write(&path, text).expect("write test ecal.ini");
    path
}

/// The venv's python, created by `scripts/ecal-venv` on first use (once per test binary; the script serializes
/// concurrent runs and is idempotent).
pub(crate) fn ecal_python() -> String {
    static PYTHON: OnceLock<Result<String, String>> = OnceLock::new();
    let found = PYTHON.get_or_init(|| {
        let script = repo().join("scripts/ecal-venv");
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
        let python = stdout.lines().last().unwrap_or_default().trim().to_string();
        if !Path::new(&python).is_file() {
            return Err(format!("{} printed no python path:\n{stdout}\n{stderr}", script.display()));
        }
        Ok(python)
    });
    match found {
        Ok(python) => python.clone(),
        Err(e) => panic!("the eCAL 6.1.1 Python environment is not available: {e}"),
    }
}

/// Path of an eCAL peer script in `tools/tests/ecal/`.
pub(crate) fn script(name: &str) -> String {
    repo().join("tools/tests/ecal").join(name).to_string_lossy().into_owned()
}

/// How many of a child's last JSON lines a failure report shows, and how much of its stderr it keeps.
const RECENT_LINES: usize = 50;
const STDERR_KEPT: usize = 64 * 1024;

/// A child process printing JSON objects, one per line, on stdout. Its stderr is collected (the tail is kept) and
/// shown, with its last lines, when a wait for it fails. On drop it gets SIGTERM (a chance to exit cleanly), then
/// SIGKILL after 3 s; the shared-memory files of dead processes are then removed, as the next shoal node would.
pub(crate) struct Proc {
    child: Child,
    lines: mpsc::Receiver<Value>,
    name: String,
    recent: RefCell<VecDeque<Value>>,
    stderr: Arc<Mutex<String>>,
}

impl Proc {
    /// Spawns `cmd` with stdin closed and stdout and stderr captured.
    pub(crate) fn spawn(name: &str, mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // Only JSON objects are the peer's lines; anything else (a stray log line) is passed over.
                if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        let mut err_pipe = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err_pipe.read(&mut buf) {
                let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
                s.push_str(&String::from_utf8_lossy(&buf[..n]));
                if s.len() > STDERR_KEPT {
                    let cut = s.len() - STDERR_KEPT / 2;
                    let cut = (cut..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(s.len());
                    s.drain(..cut);
                }
            }
        });
        Proc { child, lines: rx, name: name.to_string(), recent: RefCell::default(), stderr }
    }

    /// The name the test gave this process.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The next line before `deadline`, remembered for [`report`](Self::report).
    fn next_line(&self, deadline: Instant) -> Result<Value, RecvTimeoutError> {
        let v = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now()))?;
        let mut recent = self.recent.borrow_mut();
        if recent.len() == RECENT_LINES {
            recent.pop_front();
        }
        recent.push_back(v.clone());
        Ok(v)
    }

    /// Lines up to and including the first whose `event` is `event`, within `timeout`; an `error` line fails at once.
    pub(crate) fn until(&self, event: &str, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            match self.next_line(deadline) {
                Ok(v) if v["event"] == "error" && event != "error" => {
                    panic!("{} failed: {v}\n{}", self.name, self.report())
                }
                Ok(v) => {
                    let last = v["event"] == event;
                    seen.push(v);
                    if last {
                        return seen;
                    }
                }
                Err(_) => panic!("{} sent no {event:?} line within {timeout:?}\n{}", self.name, self.report()),
            }
        }
    }

    /// The first line whose `event` is `event`, within `timeout`.
    pub(crate) fn expect(&self, event: &str, timeout: Duration) -> Value {
        self.until(event, timeout).pop().expect("a line")
    }

    /// The next line satisfying `pred` within `timeout`; None on timeout or when the process's output ended.
    pub(crate) fn wait_for(&self, timeout: Duration, mut pred: impl FnMut(&Value) -> bool) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.next_line(deadline).ok()?;
            if pred(&v) {
                return Some(v);
            }
        }
    }

    /// Like [`wait_for`](Self::wait_for), but fails the test with the process's output when no line has `what`.
    pub(crate) fn expect_line(&self, what: &str, timeout: Duration, pred: impl FnMut(&Value) -> bool) -> Value {
        match self.wait_for(timeout, pred) {
            Some(v) => v,
            None => panic!("{}: no line with {what} within {timeout:?}\n{}", self.name, self.report()),
        }
    }

    /// The last lines received and the tail of stderr, for failure messages.
    pub(crate) fn report(&self) -> String {
        let recent = self.recent.borrow();
        let last: Vec<String> = recent.iter().rev().take(3).map(|v| truncate(&v.to_string(), 3000)).collect();
        let err = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        format!("last lines (newest first):\n{}\nstderr (tail):\n{}", last.join("\n"), tail(&err, 3000))
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends signal `sig` to the child.
    pub(crate) fn signal(&self, sig: libc::c_int) {
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else { return };
        // SAFETY: kill(2) on our own child's pid; the child is not reaped yet (we hold it), so the pid cannot have
        // been reused by another process.
        unsafe { libc::kill(pid, sig) };
    }

    /// Kills the child with SIGKILL and reaps it.
    pub(crate) fn sigkill(&mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    /// Waits up to `timeout` for the child to exit.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for a successful exit.
    pub(crate) fn wait_success(&mut self, timeout: Duration) {
        match self.wait_exit(timeout) {
            Some(status) => assert!(status.success(), "{} exited with {status}\n{}", self.name, self.report()),
            None => panic!("{} did not exit within {timeout:?}\n{}", self.name, self.report()),
        }
    }

    /// Waits for the exit of an eCAL peer that already printed its results. A failed exit is reported, not fatal:
    /// eCAL 6.1.1's Python teardown sometimes aborts ("terminate called ... Resource deadlock avoided") after a
    /// subscriber callback ran, which says nothing about what was received.
    pub(crate) fn wait_exit_reported(&mut self, timeout: Duration) {
        match self.wait_exit(timeout) {
            Some(status) if !status.success() => {
                eprintln!("note: {} exited with {status} after printing its results (eCAL teardown)", self.name);
            }
            Some(_) => {}
            None => panic!("{} did not exit within {timeout:?}\n{}", self.name, self.report()),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // A chance of a clean exit (shared-memory files, unregistration), then insist.
            self.signal(libc::SIGTERM);
            if self.wait_exit(Duration::from_secs(3)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        // A shoal process that did not exit cleanly leaves its ring and doorbell: remove those of dead processes.
        let _ = shoal::transport::shm_ring::remove_stale_segments(Path::new(shoal::transport::shm_ring::SHM_DIR));
    }
}

/// `s` cut to at most `n` bytes (on a character boundary), with an ellipsis when cut.
fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let end = (0..=n).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    format!("{}…", &s[..end])
}

/// The last `n` bytes of `s` (from a character boundary).
fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..=s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(s.len());
    &s[start..]
}

/// Checks a `shoal-peer sub` summary: `count` messages, intact, in order, none dropped, from one publisher.
pub(crate) fn assert_clean_summary(summary: &Value, count: u64) {
    assert_eq!(summary["received"], count, "every message received once: {summary}");
    assert_eq!(summary["torn"], 0, "bytes intact and sample clock = payload clock: {summary}");
    assert_eq!(summary["out_of_order"], 0, "in order, no duplicates: {summary}");
    assert_eq!(summary["drops"], 0, "nothing dropped: {summary}");
    assert_eq!(summary["publishers"], 1, "one publisher: {summary}");
    assert_eq!(summary["timed_out"], false, "{summary}");
}

/// Waits for the publisher peer's `done` (all `count` messages sent) and the `shoal-peer sub`'s clean summary
/// (`assert_clean_summary`), prints both under `name`, then waits for both processes to exit successfully.
pub(crate) fn finish_transfer(name: &str, mut publ: Proc, mut sub: Proc, count: u64) {
    let done = publ.expect("done", Duration::from_secs(25));
    assert_eq!(done["sent"], count, "the publisher sent everything: {done}");
    let summary = sub.expect("summary", Duration::from_secs(15));
    eprintln!("{name}: publisher {done}\n{name}: subscriber {summary}");
    assert_clean_summary(&summary, count);
    sub.wait_success(Duration::from_secs(5));
    publ.wait_success(Duration::from_secs(10));
}

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{args:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Whether this process runs as root (network namespaces need it).
pub(crate) fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

/// Two network namespaces ("hosts" a and b) joined by a veth pair, 10.231.`subnet`.1 and .2 (addresses that
/// exist only inside them), each with `lo` up and the multicast route `224.0.0.0/4` on its veth, so multicast stays
/// between the two. Deleted on drop (also when a test panics).
pub(crate) struct NetnsPair {
    names: [String; 2],
    addrs: [String; 2],
}

impl NetnsPair {
    /// Creates the pair; `tag` (≤ 3 chars) keeps names of parallel tests apart.
    pub(crate) fn create(tag: &str, subnet: u8) -> NetnsPair {
        let pid = std::process::id();
        let names = [format!("shoal_{tag}_a_{pid}"), format!("shoal_{tag}_b_{pid}")];
        let veths = [format!("v{tag}a{}", pid % 100_000), format!("v{tag}b{}", pid % 100_000)];
        let addrs = [format!("10.231.{subnet}.1"), format!("10.231.{subnet}.2")];
        let pair = NetnsPair { names, addrs };
        let [a, b] = &pair.names;
        let setup = || -> Result<(), String> {
            run(&["ip", "netns", "add", a])?;
            run(&["ip", "netns", "add", b])?;
            run(&["ip", "link", "add", &veths[0], "netns", a, "type", "veth", "peer", "name", &veths[1], "netns", b])?;
            for ((ns, dev), addr) in pair.names.iter().zip(&veths).zip(&pair.addrs) {
                run(&["ip", "-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
                run(&["ip", "-n", ns, "link", "set", dev, "up"])?;
                run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
                run(&["ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", dev])?;
            }
            Ok(())
        };
        if let Err(e) = setup() {
            drop(pair);
            panic!("cannot set up the network namespaces: {e}");
        }
        pair
    }

    /// The address of host `i` (0 = a, 1 = b).
    pub(crate) fn addr(&self, i: usize) -> &str {
        &self.addrs[i]
    }

    /// A command that runs `program args` inside namespace `i` with its own UTS namespace and host name
    /// `hostname`, so that both sides look like different hosts to eCAL and shoal.
    pub(crate) fn command(&self, i: usize, hostname: &str, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.names[i], "unshare", "-u", "sh", "-c", "hostname \"$0\" && exec \"$@\""]);
        cmd.arg(hostname).arg(program).args(args);
        cmd
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for n in &self.names {
            // Deleting a namespace also deletes its end of the veth pair (and so the pair).
            let _ = run(&["ip", "netns", "del", n]);
        }
    }
}
