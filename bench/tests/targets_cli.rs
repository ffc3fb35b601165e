//! `shoal-bench targets` end to end: the evaluation of saved JSON lines (`--from`), and the contract with
//! `shoal perf --json` (the fields the targets read are the ones the command line prints).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn bench(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal-bench")).arg("targets").args(args).output().expect("run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A file under the target directory for this test's JSON lines.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    dir.join(format!("shoal_bench_{}_{name}.jsonl", std::process::id()))
}

fn write_lines(path: &Path, rows: &[Value]) {
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).expect("write the JSON lines");
}

fn row(system: &str, mode: &str, wait: &str, size: u64, p50: u64) -> Value {
    json!({
        "system": system, "wait": wait, "mode": mode, "size_bytes": size, "subscribers": 1, "p50_ns": p50,
        "msgs_per_s": 1000.0, "lost": 0, "peak_rss_kb": 1000, "peer_peak_rss_kb": 1000,
    })
}

#[test]
fn saved_lines_pass_fail_and_not_measured_targets_and_the_exit_code_says_so() {
    let path = scratch("canned");
    write_lines(
        &path,
        &[
            row("shoal", "zero_copy", "spin", 64, 500),
            row("shoal", "zero_copy", "spin", 4 << 20, 600),
            row("baseline", "pingpong", "block", 64, 100),
            row("shoal", "pingpong", "block", 64, 140),
        ],
    );
    let (code, out, err) = bench(&["--from", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    let line = |id: &str, wait: &str| {
        out.lines().find(|l| l.starts_with(&format!("{id:<3} {wait:<5} "))).unwrap_or_else(|| panic!("{id}: {out}"))
    };
    assert!(line("T3", "spin").contains("1.20x <= 2.00x    PASS"), "{out}");
    assert!(line("T4", "block").contains("FAIL") && line("T4", "block").contains("64B 1.40x"), "{out}");
    assert!(line("T1", "spin").contains("NOT MEASURED") && line("T6", "-").contains("NOT MEASURED"), "{out}");
    assert!(out.contains("1 of 26 pass, 1 FAIL, 24 NOT MEASURED") && out.contains("result: FAIL"), "{out}");

    let (code, out, _) = bench(&["--from", path.to_str().unwrap(), "--json"]);
    assert_eq!(code, Some(1));
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(lines.len(), 27, "26 targets and the summary: {out}");
    assert_eq!(lines[0]["status"], "NOT MEASURED");
    assert_eq!(lines[0]["value"], Value::Null);
    assert_eq!(lines[26]["all_pass"], false);
    assert_eq!((lines[26]["pass"].as_u64(), lines[26]["not_measured"].as_u64()), (Some(1), Some(24)));
    std::fs::remove_file(&path).unwrap();

    let (code, _, err) = bench(&["--from", "/nonexistent/rows.jsonl"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("/nonexistent/rows.jsonl"), "{err}");
}

/// The `shoal` binary cargo built beside `shoal-bench` (the tools' tests make cargo build it).
fn shoal_binary() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_BIN_EXE_shoal-bench")).with_file_name("shoal");
    p.is_file().then_some(p)
}

#[test]
fn the_targets_read_what_shoal_perf_prints() {
    let Some(shoal) = shoal_binary() else {
        eprintln!("SKIPPED: no shoal binary next to shoal-bench (cargo test --workspace builds it)");
        return;
    };
    // One wait mode, few sizes, short runs: every target of the block wait, T6 and T9 (64 KB) get their values, and
    // S1 (4 MB) and S5 (the median of three runs) the ratios to the strongest plain ring.
    let reliable: &[&str] =
        &["--wait", "spin", "--reliable", "--baseline", "--throughput", "--sizes", "64", "--count", "2000"];
    let runs: [&[&str]; 9] = [
        &["--wait", "block", "--baseline", "--throughput", "--sizes", "64", "--count", "2000"],
        &["--wait", "block", "--baseline", "--pingpong", "--zero-copy", "--sizes", "64,4m", "--iterations", "100"],
        &["--wait", "block", "--subscribers", "4", "--sizes", "64", "--count", "300"],
        &["--topics", "100", "--rss"],
        &["--wait", "spin", "--huge-pages", "--throughput", "--sizes", "64k", "--count", "200"],
        &["--wait", "block", "--transport", "udp", "--baseline", "--throughput", "--sizes", "64", "--count", "2000"],
        reliable,
        reliable,
        reliable,
    ];
    // The huge-page mount scripts/test sets up as root; without it the huge-page rows fall back to normal pages
    // (and say so), which T9 reads as a FAIL.
    let huge = std::env::var("SHOAL_TEST_HUGE_PAGES").ok();
    let ini = scratch("huge_ini");
    if let Some(dir) = &huge {
        std::fs::write(&ini, format!("[shoal_shm_ring]\nhuge_pages_path = {dir}\n")).unwrap();
    }
    let mut text = String::new();
    for args in runs {
        let mut cmd = Command::new(&shoal);
        if huge.is_some() {
            cmd.env("ECAL_INI", &ini);
        }
        let out = cmd.arg("perf").arg("--json").args(args).output().expect("run shoal perf");
        assert!(out.status.success(), "shoal perf {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        text.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    let path = scratch("contract");
    std::fs::write(&path, &text).unwrap();
    let (code, out, err) = bench(&["--from", path.to_str().unwrap(), "--json"]);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(code, Some(1), "spin was not measured: {out}{err}");
    let targets: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    let get = |id: &str, wait: Option<&str>| {
        targets.iter().find(|t| t["target"] == id && t["wait"].as_str() == wait).unwrap_or_else(|| panic!("{id}"))
    };
    for (id, wait) in
        [("T2", Some("block")), ("T3", Some("block")), ("T6", None), ("N1", Some("block")), ("N2", Some("block"))]
    {
        let t = get(id, wait);
        assert!(t["value"].as_f64().is_some() && t["status"] != "NOT MEASURED", "everything it needs ran: {t}");
    }
    for (id, size) in [("T4", "64B "), ("T5", "64B ")] {
        let t = get(id, Some("block"));
        let detail = t["detail"].as_str().unwrap();
        // Unless the host changed speed during one of T4's two sizes (its checks then leave that size out, and say
        // so): without 64 B, T4 has only 4 MB's value; without 4 MB, 64 B's value stands as below.
        if id == "T4" && detail.contains("during which the host changed speed") {
            if detail.contains("ns: 64B ") || detail.contains(", 64B ") {
                continue;
            }
            assert!(detail.contains("ns: 4M "), "{t}");
        }
        assert!(t["value"].as_f64().is_some() && detail.starts_with(size), "{t}");
        assert!(detail.contains("not measured: 1K, 64K, 1M"), "{t}");
    }
    for (id, wait) in [("T1", "spin"), ("T2", "spin"), ("T3", "spin"), ("T5", "spin"), ("N3", "block"), ("N4", "block")]
    {
        assert_eq!(get(id, Some(wait))["status"], "NOT MEASURED");
    }
    let s1 = get("S1", Some("block"));
    let detail = s1["detail"].as_str().unwrap();
    // Unless the host changed speed during the 4 MB measurements (its checks then leave them out, and say so).
    if detail.contains("left out 1 measurement(s) during which the host changed speed") {
        assert!(detail.contains("ns: 4M "), "{s1}");
    } else {
        assert!(s1["value"].as_f64().is_some(), "p50_ratio against the strongest ring at 4 MB: {s1}");
        assert!(detail.contains("not measured: 64K, 1M, 8M"), "{s1}");
    }
    let s5 = get("S5", Some("spin"));
    assert!(s5["value"].as_f64().is_some() && s5["detail"].as_str().unwrap().contains(" msg/s vs "), "{s5}");
    assert!(s5["detail"].as_str().unwrap().starts_with("median "), "{s5}");
    for (id, wait) in [("S3", "block"), ("S6", "spin"), ("S6", "block")] {
        assert_eq!(get(id, Some(wait))["status"], "NOT MEASURED");
    }
    let t9 = get("T9", Some("spin"));
    assert!(
        t9["detail"].as_str().unwrap().starts_with("64K ")
            && t9["detail"].as_str().unwrap().contains("not measured: 1M, 4M"),
        "{t9}"
    );
    if huge.is_some() {
        assert_eq!(t9["value"].as_f64(), Some(2048.0), "rings on the huge-page mount: {t9}");
        std::fs::remove_file(&ini).unwrap();
    } else {
        eprintln!("SKIPPED: T9 on 2 MB pages (SHOAL_TEST_HUGE_PAGES is not set): {t9}");
        assert!(t9["value"].as_f64().is_some(), "the page size is measured also without huge pages: {t9}");
    }
}

/// A signal stops the runs: the `shoal perf` in progress is killed, what shoal-bench set up for T9 (as root: more
/// 2 MB pages and a hugetlbfs mount) is given back, and the exit status says which signal, as a shell's would. What
/// a run prints on stderr passes through.
#[test]
fn a_signal_stops_the_run_in_progress_and_gives_the_huge_pages_back() {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};

    // A stand-in for `shoal` whose every run lasts a minute: it says so on stderr, writes its pid, then sleeps.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("shoal_bench_signal_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("shoal");
    let pid_file = dir.join("run.pid");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho 'stand-in shoal: started' >&2\necho $$ > {}.tmp\nmv {0}.tmp {0}\nexec sleep 60\n",
            pid_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let pages = || std::fs::read_to_string("/proc/sys/vm/nr_hugepages").ok().map(|s| s.trim().to_string());
    let pages_before = pages();

    let mut bench = Command::new(env!("CARGO_BIN_EXE_shoal-bench"))
        .args(["targets", "--shoal"])
        .arg(&fake)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start shoal-bench");
    let start = Instant::now();
    let run_pid = loop {
        if let Ok(pid) = std::fs::read_to_string(&pid_file) {
            break pid.trim().to_string();
        }
        assert!(start.elapsed() < Duration::from_secs(20), "shoal-bench started no run within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(Command::new("kill").args(["-TERM", &bench.id().to_string()]).status().unwrap().success());
    let status = loop {
        if let Some(s) = bench.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "shoal-bench did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    bench.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(128 + 15), "{err}");
    assert!(err.contains("stopped by signal 15: run 1/32 killed"), "{err}");
    assert!(err.contains("stand-in shoal: started"), "the run's stderr passes through: {err}");
    assert!(!Path::new("/proc").join(&run_pid).exists(), "the run in progress (pid {run_pid}) was killed: {err}");
    match err.lines().find_map(|l| l.split("a hugetlbfs mounted at ").nth(1)) {
        Some(rest) => {
            let mount = rest.split(' ').next().unwrap();
            assert!(err.contains(&format!("unmounting {mount}")), "{err}");
            assert!(!Path::new(mount).exists(), "{mount} unmounted and removed: {err}");
            assert_eq!(pages(), pages_before, "the 2 MB pages given back: {err}");
        }
        None => eprintln!("SKIPPED: huge pages given back on a signal (shoal-bench set none up here): {err}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
