//! Helpers shared by the multi-process tests (`multiprocess.rs`, `timing.rs`, `udp.rs`, `ecal_udp.rs`,
//! `udp_netns.rs`, `ecal_shm.rs`): child processes that print JSON lines, the eCAL 6.1.1 Python environment, and a
//! pair of network namespaces joined by a veth pair.

#![allow(dead_code)] // each test file uses a different subset

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `shoal-peer` binary.
pub(crate) const PEER: &str = env!("CARGO_BIN_EXE_shoal-peer");

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

/// The venv's python, created by `scripts/ecal-venv` if needed (idempotent, fast once done).
pub(crate) fn ecal_python() -> String {
    let out = Command::new(repo().join("scripts/ecal-venv")).stderr(Stdio::inherit()).output().expect("run ecal-venv");
    assert!(out.status.success(), "scripts/ecal-venv failed: eCAL 6.1.1 is needed for this test");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().last().expect("python path").trim().to_string()
}

/// Path of an eCAL peer script in `tools/tests/ecal/`.
pub(crate) fn script(name: &str) -> String {
    repo().join("tools/tests/ecal").join(name).to_string_lossy().into_owned()
}

/// A child process printing JSON lines on stdout (stderr is inherited); killed on drop.
pub(crate) struct Proc {
    child: Child,
    lines: mpsc::Receiver<Value>,
    name: String,
}

impl Proc {
    /// Spawns `cmd` with its stdout captured.
    pub(crate) fn spawn(name: &str, mut cmd: Command) -> Proc {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("spawn peer");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        Proc { child, lines: rx, name: name.to_string() }
    }

    /// Lines up to and including the first whose `event` is `event`, within `timeout`; an `error` line fails at once.
    pub(crate) fn until(&self, event: &str, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(v) if v["event"] == "error" && event != "error" => panic!("{} failed: {v}", self.name),
                Ok(v) => {
                    let last = v["event"] == event;
                    seen.push(v);
                    if last {
                        return seen;
                    }
                }
                Err(_) => panic!("{} sent no {event:?} line within {timeout:?}; got {seen:?}", self.name),
            }
        }
    }

    /// The first line whose `event` is `event`, within `timeout`.
    pub(crate) fn expect(&self, event: &str, timeout: Duration) -> Value {
        self.until(event, timeout).pop().expect("a line")
    }

    /// Waits for the exit of an eCAL peer that already printed its results. A failed exit is reported, not fatal:
    /// eCAL 6.1.1's Python teardown sometimes aborts ("terminate called ... Resource deadlock avoided") after a
    /// subscriber callback ran, which says nothing about what was received.
    pub(crate) fn wait_exit_reported(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                if !status.success() {
                    eprintln!("note: {} exited with {status} after printing its results (eCAL teardown)", self.name);
                }
                return;
            }
            assert!(Instant::now() < deadline, "{} did not exit within {timeout:?}", self.name);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the child with SIGKILL and reaps it.
    pub(crate) fn sigkill(&mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    /// Waits for a successful exit.
    pub(crate) fn wait_success(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                assert!(status.success(), "{} exited with {status}", self.name);
                return;
            }
            assert!(Instant::now() < deadline, "{} did not exit within {timeout:?}", self.name);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
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
