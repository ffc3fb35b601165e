//! What the tests that need root share (the network-namespace tests here and the bridges' tests, which include this
//! file by path): running a setup command, whether this process is root (else the test prints SKIPPED and returns),
//! and which of them may run side by side within a test binary.

use std::process::Command;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

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

/// The machine's two cores, as the tests of one binary share them.
static CORES: RwLock<()> = RwLock::new(());

/// Held for its whole run by a test that mostly waits (discovery, paced streams, a cut link) in namespaces of its
/// own: such tests run side by side, as many as the test harness runs at once.
pub(crate) fn shared() -> RwLockReadGuard<'static, ()> {
    CORES.read().unwrap_or_else(|e| e.into_inner())
}

/// Held for its whole run by a test whose deadlines or figures need the two cores (large samples, measurements):
/// it waits for the tests running to end, and none starts until it is done.
pub(crate) fn alone() -> RwLockWriteGuard<'static, ()> {
    CORES.write().unwrap_or_else(|e| e.into_inner())
}
