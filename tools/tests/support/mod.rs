//! Helpers shared by the multi-process tests (`multiprocess.rs`, `timing.rs`, `udp.rs`, `ecal_udp.rs`,
//! `udp_netns.rs`, `ecal_shm.rs`, `ecal_interop.rs`): the child processes of `process.rs`, the tools' binaries,
//! summary checks, and a pair of network namespaces joined by a veth pair.

#![allow(dead_code)] // each test file uses a different subset

mod process;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

#[allow(unused_imports)] // as above
pub(crate) use process::{Proc, ecal_python, script, shm_files_of, venv_python};

/// The `shoal-peer` binary.
pub(crate) const PEER: &str = env!("CARGO_BIN_EXE_shoal-peer");

/// The `shoal-snapshot` binary.
pub(crate) const SNAPSHOT: &str = env!("CARGO_BIN_EXE_shoal-snapshot");

/// The python of the MCAP reader's venv (`mcap`, `mcap-protobuf-support`), created by `scripts/mcap-venv` on
/// first use.
pub(crate) fn mcap_python() -> String {
    static PYTHON: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    match PYTHON.get_or_init(|| venv_python("scripts/mcap-venv")) {
        Ok(python) => python.clone(),
        Err(e) => panic!("the Python MCAP reader environment is not available: {e}"),
    }
}

/// A topic name unique to this test process.
pub(crate) fn topic(name: &str) -> String {
    format!("test_{name}_{}", std::process::id())
}

/// A `shoal-peer` with `args`, reading `ecal_ini` when given (else shoal's search order, which finds none here).
pub(crate) fn shoal_peer(name: &str, args: &[&str], ecal_ini: Option<&str>) -> Proc {
    let mut cmd = Command::new(PEER);
    if let Some(ini) = ecal_ini {
        cmd.env("ECAL_INI", ini);
    }
    cmd.args(args);
    Proc::spawn(name, cmd)
}

/// An eCAL peer script of `tools/tests/ecal/`, run by the eCAL venv's python.
pub(crate) fn ecal_peer(name: &str, script_name: &str, args: &[&str]) -> Proc {
    let mut cmd = Command::new(ecal_python());
    cmd.arg(script(script_name)).args(args);
    Proc::spawn(name, cmd)
}

/// Writes an `ecal.ini` for the peers into the test's temp directory and returns its path.
pub(crate) fn write_ini(name: &str, text: &str) -> String {
    let path = format!("{}/{name}_{}.ini", env!("CARGO_TARGET_TMPDIR"), std::process::id());
    let mut text = text.to_string();
    // `SHOAL_TEST_UDP_SEND_MODE=io_thread` reruns a suite with UDP data sent by the I/O thread.
    if let Ok(mode) = std::env::var("SHOAL_TEST_UDP_SEND_MODE")
        && !text.contains("send_mode")
    {
        text.push_str(&format!("\n[shoal_network]\nsend_mode = {mode}\n"));
    }
    std::fs::write(&path, text).expect("write test ecal.ini");
    path
}

/// Checks a `shoal-peer sub` summary: `count` messages received, intact, in order, from `publishers` publishers
/// (losses allowed).
pub(crate) fn check_summary(summary: &Value, count: u64, publishers: u64) {
    assert_eq!(summary["received"], count, "every message received once: {summary}");
    assert_eq!(summary["torn"], 0, "bytes intact and sample clock = payload clock: {summary}");
    assert_eq!(summary["out_of_order"], 0, "in order, no duplicates: {summary}");
    assert_eq!(summary["publishers"], publishers, "publishers: {summary}");
}

/// [`check_summary`] for one publisher, and nothing dropped, and no time-out.
pub(crate) fn assert_clean_summary(summary: &Value, count: u64) {
    check_summary(summary, count, 1);
    assert_eq!(summary["drops"], 0, "nothing dropped: {summary}");
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

/// The shoal → eCAL counterpart of [`finish_transfer`]: waits for the shoal publisher's `done` (all `count` sent)
/// and the eCAL `sub.py`'s summary, prints both under `name`, checks that every message arrived once, in order and
/// intact from the publisher of `ready` (its ready line), waits for both exits, and returns the `msg` lines for the
/// caller's own checks.
pub(crate) fn finish_transfer_to_ecal(
    name: &str,
    mut publ: Proc,
    mut sub: Proc,
    ready: &Value,
    count: u64,
) -> Vec<Value> {
    let done = publ.expect("done", Duration::from_secs(25));
    assert_eq!(done["sent"], count, "the publisher sent everything: {done}");
    let mut lines = sub.until("summary", Duration::from_secs(25));
    let summary = lines.pop().expect("summary");
    eprintln!("{name}: shoal publisher {done}\n{name}: eCAL subscriber {summary}");
    let msgs: Vec<Value> = lines.into_iter().filter(|v| v["event"] == "msg").collect();
    let clocks: Vec<u64> = msgs.iter().map(|m| m["send_clock"].as_u64().expect("send_clock")).collect();
    assert_eq!(clocks, (1..=count).collect::<Vec<_>>(), "every message once, in order");
    for m in &msgs {
        assert_eq!(m["intact"], true, "bytes intact: {m}");
        assert_eq!(m["pub_entity_id"], ready["publisher_id"], "eCAL sees our publisher id: {m}");
    }
    assert_eq!(summary["received"], count, "{summary}");
    assert_eq!(summary["intact"], count, "{summary}");
    assert_eq!(summary["timed_out"], false, "{summary}");
    sub.wait_exit_reported(Duration::from_secs(10));
    publ.wait_success(Duration::from_secs(5));
    msgs
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
    veths: [String; 2],
    addrs: [String; 2],
}

impl NetnsPair {
    /// Creates the pair; `tag` (≤ 3 chars) keeps names of parallel tests apart.
    pub(crate) fn create(tag: &str, subnet: u8) -> NetnsPair {
        let pid = std::process::id();
        let names = [format!("shoal_{tag}_a_{pid}"), format!("shoal_{tag}_b_{pid}")];
        let veths = [format!("v{tag}a{}", pid % 100_000), format!("v{tag}b{}", pid % 100_000)];
        let addrs = [format!("10.231.{subnet}.1"), format!("10.231.{subnet}.2")];
        let pair = NetnsPair { names, veths: veths.clone(), addrs };
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

    /// Makes the host names resolve inside both namespaces: `ip netns exec` mounts `/etc/netns/<name>/hosts` over
    /// `/etc/hosts` (removed on drop). `names[i]` is the host name of namespace `i`.
    pub(crate) fn hosts(&self, names: [&str; 2]) {
        let mut text = String::from("127.0.0.1 localhost\n");
        for (addr, name) in self.addrs.iter().zip(names) {
            text.push_str(&format!("{addr} {name}\n"));
        }
        for n in &self.names {
            let dir = format!("/etc/netns/{n}");
            std::fs::create_dir_all(&dir).expect("mkdir /etc/netns/<name>");
            std::fs::write(format!("{dir}/hosts"), &text).expect("write the namespace's hosts file");
        }
    }

    /// Puts a `tc netem` qdisc on host `i`'s end of the veth pair, e.g. `["loss", "5%", "delay", "5ms"]`
    /// (it goes with the namespace). An error when the kernel has no netem (`sch_netem`).
    pub(crate) fn netem(&self, i: usize, spec: &[&str]) -> Result<(), String> {
        let mut args = vec!["ip", "netns", "exec", &self.names[i], "tc", "qdisc", "add", "dev", &self.veths[i]];
        args.extend(["root", "netem"]);
        args.extend_from_slice(spec);
        run(&args)
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
            let _ = std::fs::remove_dir_all(format!("/etc/netns/{n}"));
        }
    }
}
