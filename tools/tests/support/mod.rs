//! Helpers shared by the multi-process tests (`multiprocess.rs`, `timing.rs`, `udp.rs`, `ecal_udp.rs`,
//! `udp_netns.rs`, `tcp_netns.rs`, `impair_netns.rs`, `ecal_shm.rs`, `ecal_interop.rs`, `permissions.rs`): the child
//! processes of `process.rs`, the tools' binaries, summary checks, temporary paths removed on drop, and in
//! `netns.rs` a pair of network namespaces joined by a veth pair or, through the impairment relay of `impair.rs`, by
//! a lossy, delaying, reordering link, and in `peer.rs` the argument lists of the scripted peers (`shoal-peer pub` /
//! `sub`, eCAL's `sub.py`); `root.rs` what tests needing root share (also with the bridges' tests).

#![allow(dead_code)] // each test file uses a different subset

mod impair;
mod netns;
mod peer;
mod process;
mod root;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

#[allow(unused_imports)] // as above
pub(crate) use impair::{Impairment, LinkStats, enter_netns};
#[allow(unused_imports)] // as above
pub(crate) use netns::{NetnsPair, ecal_network_dir, is_root, root_or_skip};
#[allow(unused_imports)] // as above
pub(crate) use peer::Peer;
#[allow(unused_imports)] // as above
pub(crate) use process::{Proc, ecal_python, script, shm_files_of, venv_python};

/// `<temp dir>/shoal_<tag>_<pid>`, a file or a directory tree the test makes there, removed on drop (also when the
/// test fails).
pub(crate) struct TempPath(std::path::PathBuf);

impl TempPath {
    /// The path, not yet created.
    pub(crate) fn new(tag: &str) -> TempPath {
        TempPath(std::env::temp_dir().join(format!("shoal_{tag}_{}", std::process::id())))
    }

    /// The path as UTF-8 (for command lines).
    pub(crate) fn as_str(&self) -> &str {
        self.0.to_str().expect("UTF-8 temp path")
    }
}

impl std::ops::Deref for TempPath {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempPath {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = if self.0.is_dir() { std::fs::remove_dir_all(&self.0) } else { std::fs::remove_file(&self.0) };
    }
}

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

/// A shoal publisher started after an eCAL subscriber was ready: waits for the publisher's `ready` line, then
/// finishes as [`finish_transfer_to_ecal`] and returns the eCAL subscriber's `msg` lines.
pub(crate) fn publisher_to_ecal(name: &str, publ: Proc, sub: Proc, count: u64) -> Vec<Value> {
    let ready = publ.expect("ready", Duration::from_secs(10));
    finish_transfer_to_ecal(name, publ, sub, &ready, count)
}

/// shoal → eCAL over eCAL's TCP layer: the shoal publisher dropped nothing (every message went into the
/// connection); the eCAL subscriber got the messages intact, of `size` bytes, once, in order, the last one
/// included, from the publisher of `ready`. tcp_pubsub's subscriber hands messages to its callback through a
/// one-element queue, so while a (Python) callback runs, a newer message replaces a waiting one: the clocks it
/// missed are those gaps, and they must be few (at most a tenth).
pub(crate) fn finish_tcp_transfer_to_ecal(
    name: &str,
    mut publ: Proc,
    mut sub: Proc,
    ready: &Value,
    count: u64,
    size: usize,
) {
    let done = publ.expect("done", Duration::from_secs(60));
    assert_eq!(done["sent"], count, "{name}: the publisher sent everything: {done}");
    assert_eq!(done["drops"], 0, "{name}: shoal's TCP layer dropped nothing: {done}");
    let mut lines = sub.until("summary", Duration::from_secs(60));
    let summary = lines.pop().expect("summary");
    eprintln!("{name}: shoal publisher {done}\n{name}: eCAL subscriber {summary}");
    let msgs: Vec<Value> = lines.into_iter().filter(|v| v["event"] == "msg").collect();
    let clocks: Vec<u64> = msgs.iter().map(|m| m["send_clock"].as_u64().expect("send_clock")).collect();
    assert!(clocks.windows(2).all(|w| w[0] < w[1]), "{name}: once and in order: {clocks:?}");
    assert!(clocks.iter().all(|c| (1..=count).contains(c)), "{name}: {clocks:?}");
    let missed: Vec<u64> = (1..=count).filter(|c| !clocks.contains(c)).collect();
    eprintln!("{name}: eCAL's subscriber queue replaced {} messages: {missed:?}", missed.len());
    assert!(clocks.len() as u64 >= count * 9 / 10, "{name}: at most a tenth replaced: {missed:?}");
    assert_eq!(clocks.last(), Some(&count), "{name}: the last message arrives (nothing newer replaces it)");
    for m in &msgs {
        assert_eq!(m["intact"], true, "{name}: bytes intact: {m}");
        assert_eq!(m["size"], size, "{m}");
        // eCAL's TCP header names only topic and publisher id (its own writer leaves host and pid empty too).
        assert_eq!(m["pub_host"], "", "{m}");
        assert_eq!(m["pub_entity_id"], ready["publisher_id"], "{name}: eCAL sees our publisher id: {m}");
    }
    assert_eq!(summary["timed_out"], false, "{name}: {summary}");
    eprintln!("{name}: {} of {count} delivered to eCAL in order, intact", clocks.len());
    sub.wait_success(Duration::from_secs(10));
    publ.wait_success(Duration::from_secs(10));
}
