//! A small run of `scripts/registration-scale` (10 processes on 5 topics, with the debug build of
//! `shoal-regscale`): every process matches, the measurement produces its figures and a new topic is discovered.
//! Not a timing test: the CPU figure is only checked to be there.

use std::process::Command;

/// The number after `label` on the line that has it.
fn figure(out: &str, label: &str) -> Option<f64> {
    let line = out.lines().find(|l| l.contains(label))?;
    line.split(label).nth(1)?.split_whitespace().next()?.parse().ok()
}

#[test]
fn ten_processes_match_and_the_figures_are_produced() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/registration-scale");
    let out = Command::new(script)
        .args(["10", "5", "2"])
        .env("SHOAL_REGSCALE_BIN", env!("CARGO_BIN_EXE_shoal-regscale"))
        .env("SETTLE", "1")
        .output()
        .expect("run scripts/registration-scale");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("10 processes (10 alive), 5 topics"), "{stdout}\n{stderr}");
    let cores = figure(&stdout, "CPU, all idle processes:").expect("a CPU figure");
    assert!(cores >= 0.0, "{stdout}");
    // Every process receives the 10 processes' and their 10 entities' registration every second, and more (the
    // counting process's own, on a host's loopback other shoal processes').
    let datagrams = figure(&stdout, "registration datagrams/s:").expect("a datagram rate");
    assert!(datagrams >= 15.0, "{stdout}");
    assert!(figure(&stdout, "RSS per process:").expect("an RSS figure") > 0.0, "{stdout}");
    let discovery = stdout.lines().find(|l| l.contains("discovery of a new topic:")).expect("a discovery line");
    assert!(!discovery.contains("not matched") && discovery.matches(" ms").count() == 4, "{stdout}\n{stderr}");
}
