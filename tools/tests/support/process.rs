//! Child processes for tests, shared by the tools' tests (through `support/mod.rs`) and by
//! `examples/tests/ecal_typed.rs` (through `#[path]`): processes that print JSON lines, and the eCAL 6.1.1 Python
//! environment with the peer scripts of `tools/tests/ecal/`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The repository root (both packages that include this file are one level below it).
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv's python, created by `scripts/ecal-venv` on first use (once per test binary; the script serializes
/// concurrent runs and is idempotent).
pub(crate) fn ecal_python() -> String {
    static PYTHON: OnceLock<Result<String, String>> = OnceLock::new();
    match PYTHON.get_or_init(|| venv_python("scripts/ecal-venv")) {
        Ok(python) => python.clone(),
        Err(e) => panic!("the eCAL 6.1.1 Python environment is not available: {e}"),
    }
}

/// Runs a venv script of `scripts/` (`ecal-venv`, `mcap-venv`: each creates its venv under `target/` once and prints
/// the venv's python last) and returns that python.
pub(crate) fn venv_python(script_path: &str) -> Result<String, String> {
    let script = repo().join(script_path);
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
/// SIGKILL after 3 s; the shared-memory files it left are then removed.
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
                Err(_) => panic!(
                    "{} sent no {event:?} line within {timeout:?}\n{}\n{}",
                    self.name,
                    self.report(),
                    self.where_it_waits()
                ),
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

    /// Where a child that stopped answering waits: each thread's name and kernel wait channel, and, where `gdb` is
    /// installed, every thread's stack (a rare hang in a CI run is then diagnosed from its log).
    fn where_it_waits(&self) -> String {
        let pid = self.child.id();
        let mut out = format!("threads of pid {pid} (name, wait channel):\n");
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for t in tasks.flatten() {
                let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
                out.push_str(&format!(
                    "  {} {} {}\n",
                    t.file_name().to_string_lossy(),
                    read("comm").trim(),
                    read("wchan")
                ));
            }
        }
        let gdb = Command::new("timeout")
            .args(["30", "gdb", "-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt 20"])
            .stdin(Stdio::null())
            .output();
        if let Ok(o) = gdb
            && o.status.success()
        {
            out.push_str(&format!("gdb stacks:\n{}", tail(&String::from_utf8_lossy(&o.stdout), 8000)));
        }
        out
    }

    /// What the child wrote to stderr so far (its tail).
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
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
        // A shoal process that did not exit cleanly leaves its ring and doorbell: remove this one's (only this
        // one's: the crash tests check that the next node removes a dead process's files).
        for name in shm_files_of(self.child.id()) {
            let _ = std::fs::remove_file(Path::new(shoal::transport::shm_ring::SHM_DIR).join(name));
        }
    }
}

/// The files process `pid` has in /dev/shm, and on the huge-page mount `scripts/test` set up
/// (`SHOAL_TEST_HUGE_PAGES`), if any (shoal's names carry the owner's pid).
pub(crate) fn shm_files_of(pid: u32) -> Vec<String> {
    let prefixes = [format!("shoal_{pid}_"), format!("shoal_db_{pid}_")];
    let mut dirs = vec![std::path::PathBuf::from(shoal::transport::shm_ring::SHM_DIR)];
    dirs.extend(std::env::var_os("SHOAL_TEST_HUGE_PAGES").map(std::path::PathBuf::from));
    dirs.iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flat_map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| prefixes.iter().any(|p| n.starts_with(p.as_str())))
                .collect::<Vec<_>>()
        })
        .collect()
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
