//! What the tests that need root share (the network-namespace tests here and the bridges' tests, which include this
//! file by path): running a setup command, whether this process is root (else the test prints SKIPPED and returns),
//! and one such test at a time within a test binary.

use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// Runs `args[0]` with the rest as arguments; its stderr when it fails.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
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

/// True when root; otherwise prints `SKIPPED <test>` with the reason, and the test returns without running.
pub(crate) fn root_or_skip(test: &str) -> bool {
    let root = is_root();
    if !root {
        eprintln!("SKIPPED {test}: creating network namespaces needs root");
    }
    root
}

/// Held by a test for its whole run: one at a time (large transfers and timing need the two cores).
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
