//! The `shoal perf --json` runs the targets need, run as child processes, and their JSON lines.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::targets::{
    ECAL_SIZES, HUGE_SIZES, LARGE_SIZES, MANY_SIZES, MANY_SUBSCRIBERS, N3_RUNS, NET_WAIT, PINGPONG_RUNS, S5_RUNS,
    SIZES, STREAM_RUNS, SUBSCRIBERS, TOPICS,
};

/// One invocation of `shoal perf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    /// The arguments after `shoal perf`.
    pub(crate) args: Vec<String>,
    /// The targets it measures for.
    pub(crate) for_targets: &'static str,
}

impl Run {
    fn new(for_targets: &'static str, args: &[&str]) -> Run {
        Run { args: args.iter().map(|a| (*a).to_string()).collect(), for_targets }
    }

    /// The command line, for messages.
    pub(crate) fn command_line(&self) -> String {
        format!("shoal perf {}", self.args.join(" "))
    }
}

/// What the targets measure: first shoal's block-mode ping-pong at 64 B - 8 MB beside eCAL 6.1.1's C++ one
/// (`--against ecal`); then per wait mode in order spin, block: the plain rings (line, warm and one as deep as
/// shoal's ring for each size) and shoal (each with a fresh publisher) streaming 64 B and 1 KB, then ping-pong at
/// every target size and 8 MB beside the plain rings and iceoryx2, size by size, each size's shoal ping-pong followed
/// by its zero-copy ping-pong on the same ring (in spin mode then the 64 B ping-pong alone beside them, for S4), then fan-out to 1 and 4 and to 1 and 16 subscriber processes; then a separate process with 100 topics;
/// reliable shoal streams of 64 B and 1 MiB beside the plain rings (spin); last shoal streams of 64 KB - 4 MB with
/// rings on normal and on huge pages (spin, `--huge-pages`); then shoal's UDP layer at 64 B and three times at 1 MiB and
/// its TCP layer at 1 MiB, with shoal's defaults (`send_mode = auto`: the 64 B stream goes through the I/O thread's batches,
/// 1 MiB messages from the publisher's thread), against the raw socket programs (block, `--transport udp|tcp
/// --baseline`).
///
/// The eCAL run comes first so that the block-mode ping-pong rows of the run with the plain rings, which T4 reads
/// (the latest row of each size), are not followed by another run's.
pub(crate) fn plan() -> Vec<Run> {
    let sizes = |list: &[(u64, &str)]| list.iter().map(|(s, _)| s.to_string()).collect::<Vec<_>>().join(",");
    let all_sizes = sizes(&SIZES);
    let mut pingpong_sizes: Vec<(u64, &str)> = SIZES.to_vec();
    pingpong_sizes.extend(LARGE_SIZES.iter().filter(|l| !SIZES.contains(l)));
    let pingpong_sizes = sizes(&pingpong_sizes);
    let (subscribers, many) = (SUBSCRIBERS.to_string(), MANY_SUBSCRIBERS.to_string());
    let mut runs = Vec::new();
    let ecal_sizes = sizes(&ECAL_SIZES);
    // S3 takes the median of these runs' ratios, as the ping-pong targets do.
    for _ in 0..PINGPONG_RUNS {
        runs.push(Run::new(
            "S3",
            &["--json", "--wait", "block", "--pingpong", "--against", "ecal", "--sizes", &ecal_sizes],
        ));
    }
    for wait in ["spin", "block"] {
        let perf = |targets, extra: &[&str]| Run::new(targets, &[&["--json", "--wait", wait][..], extra].concat());
        // T2 and T7 take the median of these runs' ratios. The block-mode streams are pinned (this process on CPU 0,
        // the reader's on CPU 1): unpinned, this VM's scheduler now and then wakes the sleeping reader onto the
        // writer's vCPU while the other idles, and the pair then shares one vCPU for the whole stream, which
        // measures that placement rather than the rings (a writer that waits on a full ring loses nothing that way,
        // a best-effort one overwrites). A spinning reader never sleeps, so no wake-up places it; pinned, it would
        // share its CPU with whatever else wakes there (its runtime threads, the host's), so spin streams are not.
        let pin: &[&str] = if wait == "block" { &["--pin"] } else { &[] };
        for _ in 0..STREAM_RUNS {
            runs.push(perf("T2 T7", &[pin, &["--baseline", "--throughput", "--sizes", "64,1024"]].concat()));
        }
        let args = ["--baseline", "--pingpong", "--zero-copy", "--sizes", &pingpong_sizes];
        // T1, T3, T4, S1 and S2 take the median of these runs' ratios.
        for _ in 0..PINGPONG_RUNS {
            runs.push(perf("T1 T3 T4 S1 S2", &args));
        }
        if wait == "spin" {
            // S4 takes the median of three short runs of 64 B alone, three more moments of the host than the runs
            // above give it (this VM's line ring took 95 ns and 345 ns in consecutive runs, as the host moves the two
            // spinning threads to other cores), each measuring the references and shoal seconds apart.
            for _ in 0..PINGPONG_RUNS {
                runs.push(perf("S4", &["--baseline", "--pingpong", "--sizes", "64"]));
            }
        }
        runs.push(perf("T5", &["--subscribers", &subscribers, "--sizes", &all_sizes]));
        runs.push(perf("S6", &["--subscribers", &many, "--sizes", &sizes(&MANY_SIZES)]));
    }
    runs.push(Run::new("T6", &["--json", "--topics", &TOPICS.to_string(), "--rss"]));
    let args = ["--json", "--wait", "spin", "--reliable", "--baseline", "--throughput", "--sizes", "64,1048576"];
    runs.push(Run::new("T8 S5", &args));
    // S5 is the median of three such runs (each measures the plain rings, then shoal): on a 2-core VM one run lands
    // in one of two regimes by where its threads happen to run (shoal 3.9 M or 7.4 M msg/s in consecutive runs).
    let args = ["--json", "--wait", "spin", "--reliable", "--baseline", "--throughput", "--sizes", "64"];
    for _ in 1..S5_RUNS {
        runs.push(Run::new("S5", &args));
    }
    let huge_sizes = sizes(&HUGE_SIZES);
    runs.push(Run::new("T9", &["--json", "--wait", "spin", "--huge-pages", "--throughput", "--sizes", &huge_sizes]));
    // N3 takes the median of its runs.
    let n3 = std::iter::repeat_n(("N3", "udp", "1048576"), N3_RUNS);
    for (targets, transport, sizes) in
        std::iter::once(("N1 N2", "udp", "64")).chain(n3).chain([("N4", "tcp", "1048576")])
    {
        let args =
            ["--json", "--wait", NET_WAIT, "--transport", transport, "--baseline", "--throughput", "--sizes", sizes];
        runs.push(Run::new(targets, &args));
    }
    runs
}

/// Makes the huge-page runs (T9) put their rings on the hugetlbfs mount `dir` (`shoal perf --huge-pages-path`).
pub(crate) fn on_huge_pages_at(plan: &mut [Run], dir: &Path) {
    for run in plan.iter_mut().filter(|r| r.args.iter().any(|a| a == "--huge-pages")) {
        run.args.push("--huge-pages-path".into());
        run.args.push(dir.display().to_string());
    }
}

/// The `shoal` binary: `explicit` (`--shoal`), else `$SHOAL_BIN`, else `shoal` next to this executable (the same
/// target directory and profile).
pub(crate) fn find_shoal(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let path = match explicit.or_else(|| std::env::var_os("SHOAL_BIN").map(PathBuf::from)) {
        Some(p) => p,
        None => std::env::current_exe()
            .context("cannot find this executable to look for `shoal` next to it; pass --shoal PATH")?
            .with_file_name("shoal"),
    };
    if !path.is_file() {
        bail!(
            "no shoal binary at {}: build it with the same profile as shoal-bench (`cargo build --release -p \
             shoal-tools -p shoal-bench`), or pass --shoal PATH (or set SHOAL_BIN)",
            path.display()
        );
    }
    Ok(path)
}

/// The rows of all runs and the runs that failed.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Every JSON object the runs printed, in order.
    pub(crate) rows: Vec<Value>,
    /// One line per failed run: its command line and what went wrong.
    pub(crate) failures: Vec<String>,
}

/// A signal stopped the runs (`run_all`): its number.
#[derive(Debug, thiserror::Error)]
#[error("stopped by signal {0}")]
pub(crate) struct Interrupted(pub(crate) i32);

/// How often a run's end or a signal is looked for.
const WAIT_POLL: Duration = Duration::from_millis(20);

/// Runs every run of `runs` one after the other (a failed run does not stop the others: the targets it measures
/// for are then not measured), printing progress on stderr; the runs' own stderr passes through. Each JSON line
/// is also written to `save`. Once `signal` holds a signal number (the handlers `main` installs store it), the run
/// in progress is killed (its peers die with it) and `Interrupted` returned, so that the caller undoes what it set
/// up (the huge pages).
pub(crate) fn run_all(
    shoal: &Path,
    runs: &[Run],
    mut save: Option<&mut dyn Write>,
    signal: &AtomicUsize,
) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    let interrupted = || match signal.load(Ordering::Relaxed) {
        0 => None,
        sig => Some(Interrupted(i32::try_from(sig).unwrap_or(i32::MAX))),
    };
    for (i, run) in runs.iter().enumerate() {
        if let Some(stop) = interrupted() {
            return Err(stop.into());
        }
        eprintln!("shoal-bench: run {}/{} for {}: {}", i + 1, runs.len(), run.for_targets, run.command_line());
        let start = Instant::now();
        let mut cmd = Command::new(shoal);
        cmd.arg("perf").args(&run.args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                out.failures.push(format!("{}: cannot start {}: {e}", run.command_line(), shoal.display()));
                continue;
            }
        };
        // Its stdout is read on a thread while this one watches for its end and for a signal.
        let mut stdout = child.stdout.take().context("the child's stdout")?;
        let reader = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            stdout.read_to_end(&mut bytes).map(|_| bytes)
        });
        let status = loop {
            if let Some(stop) = interrupted() {
                let _ = child.kill();
                let _ = child.wait();
                eprintln!("shoal-bench: {stop}: run {}/{} killed", i + 1, runs.len());
                return Err(stop.into());
            }
            match child.try_wait().with_context(|| format!("waiting for {}", run.command_line()))? {
                Some(status) => break status,
                None => std::thread::sleep(WAIT_POLL),
            }
        };
        let stdout = match reader.join() {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => {
                out.failures.push(format!("{}: cannot read its output: {e}", run.command_line()));
                continue;
            }
            Err(_) => bail!("the thread reading {}'s output panicked", run.command_line()),
        };
        let text = String::from_utf8_lossy(&stdout);
        let (mut rows, bad) = parse_lines(&text);
        // Each row says which run printed it (targets that take the median over runs pair a run's rows) and for
        // which targets.
        for r in &mut rows {
            r["bench_run"] = serde_json::json!(i);
            r["bench_for"] = serde_json::json!(run.for_targets);
        }
        if let Some(w) = save.as_deref_mut() {
            for r in &rows {
                writeln!(w, "{r}").context("writing --save")?;
            }
        }
        eprintln!("shoal-bench:   {} rows in {:.1} s, {}", rows.len(), start.elapsed().as_secs_f64(), status);
        if !status.success() {
            out.failures.push(format!("{}: {} (its error is above)", run.command_line(), status));
        }
        if let Some(line) = bad {
            out.failures.push(format!("{}: printed a line that is not a JSON object: {line:?}", run.command_line()));
        }
        out.rows.extend(rows);
    }
    Ok(out)
}

/// The JSON objects among `text`'s lines, and the first non-empty line that is not one.
pub(crate) fn parse_lines(text: &str) -> (Vec<Value>, Option<String>) {
    let mut rows = Vec::new();
    let mut bad = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => rows.push(v),
            _ => {
                bad.get_or_insert_with(|| line.to_string());
            }
        }
    }
    (rows, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_huge_page_run_is_pointed_at_the_mount() {
        let mut p = plan();
        on_huge_pages_at(&mut p, Path::new("/tmp/h"));
        let pointed: Vec<&Run> = p.iter().filter(|r| r.args.iter().any(|a| a == "--huge-pages-path")).collect();
        assert_eq!(pointed.len(), 1);
        assert_eq!(pointed[0].for_targets, "T9");
        assert!(
            pointed[0]
                .command_line()
                .ends_with("--huge-pages --throughput --sizes 65536,1048576,4194304 --huge-pages-path /tmp/h"),
            "{}",
            pointed[0].command_line()
        );
    }

    #[test]
    fn the_plan_measures_every_target_size_in_both_waits() {
        let p = plan();
        assert_eq!(p.len(), 32);
        for s3 in &p[..PINGPONG_RUNS] {
            assert_eq!(
                s3.command_line(),
                "shoal perf --json --wait block --pingpong --against ecal --sizes 64,65536,1048576,4194304,8388608"
            );
        }
        // Per wait mode, the streams with the plain rings STREAM_RUNS times (pinned in block mode), then the
        // ping-pong with them PINGPONG_RUNS times (the targets take the medians).
        for (at, wait, pin) in [(3, "spin", ""), (14, "block", " --pin")] {
            for r in &p[at..at + STREAM_RUNS] {
                assert_eq!(
                    (r.command_line().as_str(), r.for_targets),
                    (
                        format!("shoal perf --json --wait {wait}{pin} --baseline --throughput --sizes 64,1024")
                            .as_str(),
                        "T2 T7"
                    )
                );
            }
            for r in &p[at + STREAM_RUNS..at + STREAM_RUNS + PINGPONG_RUNS] {
                assert_eq!(
                    r.command_line(),
                    format!(
                        "shoal perf --json --wait {wait} --baseline --pingpong --zero-copy --sizes \
                         64,1024,65536,1048576,4194304,8388608"
                    )
                );
            }
        }
        for s4 in &p[9..9 + PINGPONG_RUNS] {
            assert_eq!(
                (s4.command_line().as_str(), s4.for_targets),
                ("shoal perf --json --wait spin --baseline --pingpong --sizes 64", "S4")
            );
        }
        assert_eq!(p[13].command_line(), "shoal perf --json --wait spin --subscribers 16 --sizes 64,1048576");
        assert_eq!(p[20].args[..4], ["--json", "--wait", "block", "--subscribers"]);
        assert_eq!(p[22].command_line(), "shoal perf --json --topics 100 --rss");
        assert_eq!(
            p[23].command_line(),
            "shoal perf --json --wait spin --reliable --baseline --throughput --sizes 64,1048576"
        );
        for s5 in &p[24..26] {
            assert_eq!(
                (s5.command_line().as_str(), s5.for_targets),
                ("shoal perf --json --wait spin --reliable --baseline --throughput --sizes 64", "S5")
            );
        }
        assert_eq!(
            p[26].command_line(),
            "shoal perf --json --wait spin --huge-pages --throughput --sizes 65536,1048576,4194304"
        );
        assert!(p.iter().all(|r| r.args[0] == "--json"));
        assert_eq!(
            p[27].command_line(),
            "shoal perf --json --wait block --transport udp --baseline --throughput --sizes 64"
        );
    }

    #[test]
    fn lines_that_are_not_json_objects_are_reported() {
        let (rows, bad) = parse_lines("{\"a\":1}\n\n{\"b\":2}\n");
        assert_eq!((rows.len(), bad), (2, None));
        let (rows, bad) = parse_lines("{\"a\":1}\nsystem   wait\n[1]\n");
        assert_eq!((rows.len(), bad.as_deref()), (1, Some("system   wait")));
    }

    #[test]
    fn a_missing_shoal_binary_says_how_to_build_it() {
        let e = find_shoal(Some("/nonexistent/shoal".into())).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/shoal") && e.contains("cargo build --release -p shoal-tools"), "{e}");
    }
}
