//! Shared-memory permissions between two users: shoal's files are owner-only by default, and
//! `[shoal_security] shm_access` opens them to the group or to everyone.
//!
//! A publisher runs as one unprivileged user and a subscriber as another (`setpriv`, so no accounts are needed;
//! root only, SKIPPED otherwise). With the default, the subscriber cannot open the publisher's ring, says so on
//! stderr with what to change, and receives nothing (no silent fallback to another layer); with `shm_access = all`
//! on both sides every message arrives over the ring.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use support::{PEER, Proc, TempPath, is_root, topic};

/// Held while `shoal-peer` is copied and while a child is spawned: a child forked while the other test's copy is
/// still open for writing would hold that descriptor until its exec, and exec'ing the copy then fails with
/// ETXTBSY ("Text file busy"). `Command::spawn` returns only after the child's exec, so the lock covers the window.
static COPY_OR_SPAWN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn spawn(name: &str, cmd: Command) -> Proc {
    let _g = COPY_OR_SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    Proc::spawn(name, cmd)
}

const PUB_UID: u32 = 64_501;
const SUB_UID: u32 = 64_502;

/// A directory every user can read, holding a copy of `shoal-peer` (the build tree may not be readable by others);
/// removed on drop, also when the test fails.
fn shared_dir(tag: &str) -> TempPath {
    let dir = TempPath::new(tag);
    std::fs::create_dir_all(&dir).expect("create the shared directory");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod the shared directory");
    let peer = dir.join("shoal-peer");
    let _g = COPY_OR_SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    if !peer.exists() {
        std::fs::copy(PEER, &peer).expect("copy shoal-peer");
        std::fs::set_permissions(&peer, std::fs::Permissions::from_mode(0o755)).expect("chmod shoal-peer");
    }
    dir
}

fn ini(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write ini");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod ini");
    path.display().to_string()
}

/// `shoal-peer args` as user `uid` (and group `uid`), with `ecal_ini`.
fn peer_as(uid: u32, name: &str, dir: &std::path::Path, ecal_ini: &str, args: &[&str]) -> Proc {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(dir.join("shoal-peer"))
        .args(args)
        .env("ECAL_INI", ecal_ini)
        .env("HOME", dir)
        .current_dir(dir);
    spawn(name, cmd)
}

/// `first_ms`: how long the subscriber waits for its first message (short where it must receive nothing).
fn exchange(
    dir: &std::path::Path,
    ecal_ini: &str,
    t: &str,
    count: u64,
    first_ms: &str,
) -> (serde_json::Value, Proc, Proc) {
    let c = count.to_string();
    let args = ["sub", "--topic", t, "--count", &c, "--idle-ms", "3000", "--first-ms", first_ms];
    let sub = peer_as(SUB_UID, "sub (user 2)", dir, ecal_ini, &args);
    sub.expect("ready", Duration::from_secs(20));
    let args = ["pub", "--topic", t, "--count", &c, "--rate", "200", "--size", "64", "--wait-subs", "1"];
    let publ = peer_as(PUB_UID, "pub (user 1)", dir, ecal_ini, &args);
    let summary = sub.expect("summary", Duration::from_secs(40));
    (summary, publ, sub)
}

#[test]
fn another_users_subscriber_is_refused_by_default_and_served_with_shm_access_all() {
    if !is_root() {
        eprintln!("SKIPPED: the two-user test needs root to start processes as other users");
        return;
    }
    let dir = shared_dir("two_users");
    // Only the ring between the two: with the eCAL layers off nothing can carry the data in its place.
    let layers = "[publisher]\nuse_shm = false\nuse_udp_mc = false\n[subscriber]\nshm_rec_enabled = false\n\
                  udp_mc_rec_enabled = false\n";

    // Default (owner only): refused, with the reason and the remedy on stderr.
    let default_ini = ini(&dir, "owner.ini", layers);
    let t = topic("two_users_owner");
    let (summary, mut publ, mut sub) = exchange(&dir, &default_ini, &t, 50, "5000");
    eprintln!("owner only: {summary}");
    assert_eq!(summary["received"], 0, "another user's subscriber read an owner-only ring: {summary}");
    let err = sub.stderr();
    assert!(err.contains("Permission denied") && err.contains("shm_access"), "no clear error:\n{err}");
    publ.wait_exit(Duration::from_secs(20));
    sub.wait_exit(Duration::from_secs(10));

    // shm_access = all on both sides: every message arrives.
    let open_ini = ini(&dir, "all.ini", &format!("{layers}[shoal_security]\nshm_access = all\n"));
    let t = topic("two_users_all");
    let (summary, mut publ, mut sub) = exchange(&dir, &open_ini, &t, 50, "30000");
    eprintln!("shm_access = all: {summary}");
    assert_eq!(summary["received"], 50, "{summary}\n{}", sub.report());
    assert_eq!(summary["torn"], 0, "{summary}");
    publ.wait_success(Duration::from_secs(20));
    sub.wait_success(Duration::from_secs(10));
}

#[test]
fn files_are_created_with_the_configured_mode() {
    // The ring of a publisher and its node's doorbell, created by a child with each setting.
    let dir = shared_dir("modes");
    for (access, ring_mode, bell_mode) in [("owner", 0o600, 0o600), ("group", 0o640, 0o660), ("all", 0o644, 0o666)] {
        let ini = format!("[shoal_security]\nshm_access = {access}\n");
        // One node per process and configuration: run each in a child (`shoal-peer pub` creates ring and doorbell).
        let path = self::ini(&dir, &format!("mode_{access}.ini"), &ini);
        let t = topic(&format!("modes_{access}"));
        let mut cmd = Command::new(dir.join("shoal-peer"));
        cmd.args(["pub", "--topic", &t, "--count", "0", "--wait-subs", "0", "--rate", "10"]).env("ECAL_INI", &path);
        let mut publ = spawn("pub", cmd);
        publ.expect("ready", Duration::from_secs(20));
        let pid = publ.pid();
        let modes: Vec<(String, u32)> = support::shm_files_of(pid)
            .into_iter()
            .filter_map(|f| {
                let m = std::fs::metadata(format!("/dev/shm/{f}")).ok()?.permissions().mode() & 0o777;
                Some((f, m))
            })
            .collect();
        let ring = modes.iter().find(|(f, _)| !f.starts_with("shoal_db_") && !f.contains("_ecal")).expect("a ring");
        let bell = modes.iter().find(|(f, _)| f.starts_with("shoal_db_")).expect("a doorbell file");
        assert_eq!(ring.1, ring_mode, "{access}: ring {ring:?}");
        assert_eq!(bell.1, bell_mode, "{access}: doorbell {bell:?}");
        publ.signal(libc::SIGTERM);
        publ.wait_exit(Duration::from_secs(10));
    }
}
