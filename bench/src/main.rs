//! `shoal-bench`: shoal's performance acceptance checks, run against the built `shoal` command line.
//!
//! `shoal-bench targets` runs `shoal perf ... --json` as child processes (the `shoal` binary next to this one,
//! `$SHOAL_BIN` or `--shoal`), evaluates targets T1-T9, N1-N4 and S1-S6 from their JSON lines and prints one row
//! per target. The exit code is 0 only when every target was measured and passed. It depends on `shoal perf`'s
//! output format, not on its code.

mod hugepages;
mod runs;
mod targets;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use targets::{Rows, Status};

/// shoal's acceptance benchmarks.
#[derive(Debug, Parser)]
#[command(name = "shoal-bench", about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure what targets T1-T9, N1-N4 and S1-S6 need with `shoal perf --json` and check them (exit code 0: all pass).
    Targets(TargetsArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "\
Runs, per wait mode (spin, block): the baseline ring (as deep as shoal's ring for each size) and
shoal streaming 64 B (T2) and 1 KB (T7), three times, block mode pinned (writer on CPU 0, reader on
CPU 1: unpinned, a small VM's scheduler may wake a sleeping reader onto the writer's vCPU for a whole
stream), T2 and T7 taking the median of the three runs' ratios and T2 needing the paced stream lossless
in most runs; ping-pong at 64 B-8 MB and zero-copy (T1 spin, T4 block, T3), three times (T1, T3, T4,
S1 and S2 take the median of the three runs' ratios, each run's shoal against the same run's
references: one run in another regime of a small VM does not decide), in spin mode then three runs of
64 B alone (S4's median; every run measures size by size, the rings and shoal seconds apart, and a
size whose host checks, right before its references and right after shoal, say the host changed
speed meanwhile is left out of these medians for that run); fan-out to 1 and 4 subscriber
processes (T5); then a process with 100 topics (T6); last reliable
shoal streams of 64 B and 1 MiB, which must lose nothing (T8), and two more of 64 B (S5); shoal
streams of 64 KB-4 MB with rings on normal and on huge pages (T9: huge_pages rings on 2 MB pages in
both processes, as smaps shows; as root shoal-bench reserves 600 more 2 MB pages and mounts a
private hugetlbfs for that run, both undone at the end or on SIGINT, SIGTERM or SIGHUP (which
stop the runs), else it needs a hugetlbfs mount at the ini's huge_pages_path with free pages);
then, with --wait block,
shoal's UDP layer streaming 64 B and (three times) 1 MiB and its TCP layer 1 MiB, with shoal's defaults,
against raw socket programs (N1: 64 B UDP >= 0.5x raw sendmmsg, N2: 64 B UDP >= 1 M msg/s with 0 lost, N3:
1 MiB UDP >= 0.9x raw UDP, the median of the three runs, each against its own raw run, N4: 1 MiB TCP >= 0.7x
raw TCP). S1-S6 set shoal against the strongest reference of the
same run, from the ratios shoal perf prints: S1 copying ping-pong p50 at 64 KB-8 MB <= 1.1x the fastest plain ring
(line, warm or deep), S2 <= 1.0x iceoryx2 0.10 (scripts/iceoryx2 builds it), S3 block mode at 64 B-8 MB <= 0.8x
eCAL 6.1.1's C++ ping-pong (scripts/ecal-cpp builds it; these three runs come first, the median taken),
S4 64 B spin p50 <= 1.5x the fastest plain ring, S5 a reliable 64 B stream >= 0.5x the faster plain ring
whose writer waits (the median of three runs, each measuring the rings and then shoal), with nothing
lost in any, S6 the cost of a send to 16 subscriber processes <= 1.3x to one (64 B, 1 MB). A target
whose measurements are missing (a failed run, a missing row or value, a reference not built) is NOT MEASURED, which fails the check like a
FAIL does.")]
struct TargetsArgs {
    /// The shoal binary to measure (default: $SHOAL_BIN, else `shoal` next to this executable).
    #[arg(long, value_name = "PATH")]
    shoal: Option<PathBuf>,
    /// Evaluate the JSON lines of an earlier run (written by --save) instead of measuring.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["shoal", "save"])]
    from: Option<PathBuf>,
    /// Also write every JSON line the runs printed to FILE.
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// One JSON object per target and a final summary object instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let Command::Targets(args) = Cli::parse().command;
    match targets_command(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => match e.downcast_ref::<runs::Interrupted>() {
            // As a shell reports a command that a signal ended.
            Some(runs::Interrupted(sig)) => ExitCode::from(u8::try_from(128 + sig).unwrap_or(u8::MAX)),
            None => {
                eprintln!("shoal-bench: error: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

/// Measures (or reads) the rows, prints the targets; `Ok(true)` when every target passed and no run failed.
fn targets_command(args: &TargetsArgs) -> anyhow::Result<bool> {
    let outcome = match &args.from {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let (rows, bad) = runs::parse_lines(&text);
            if let Some(line) = bad {
                anyhow::bail!("{} has a line that is not a JSON object: {line:?}", path.display());
            }
            runs::Outcome { rows, failures: Vec::new() }
        }
        None => {
            let shoal = runs::find_shoal(args.shoal.clone())?;
            let mut save = match &args.save {
                Some(p) => Some(BufWriter::new(File::create(p).with_context(|| format!("creating {}", p.display()))?)),
                None => None,
            };
            let mut plan = runs::plan();
            // SIGINT, SIGTERM or SIGHUP stop the runs and the huge pages below are given back (a second one ends
            // this process at once).
            let signal = Arc::new(AtomicUsize::new(0));
            let seen = Arc::new(AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
                let number = usize::try_from(sig).context("a signal number")?;
                // In this order: the shutdown looks at `seen` before the second handler sets it.
                signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, Arc::clone(&seen))
                    .context("cannot install the signal handler")?;
                signal_hook::flag::register(sig, Arc::clone(&seen)).context("cannot install the signal handler")?;
                signal_hook::flag::register_usize(sig, Arc::clone(&signal), number)
                    .context("cannot install the signal handler")?;
            }
            // T9 needs rings on 2 MB pages: on a host with none set up, as root, a private mount for its run.
            let huge = match hugepages::HugePages::provide(hugepages::T9_PAGES) {
                Ok(h) => {
                    eprintln!(
                        "shoal-bench: for T9, {} more 2 MB pages reserved and a hugetlbfs mounted at {} (undone \
                         at the end and on SIGINT, SIGTERM or SIGHUP; if this process is killed otherwise or \
                         signalled twice: umount that directory and lower vm.nr_hugepages by {})",
                        h.added(),
                        h.dir().display(),
                        h.added()
                    );
                    runs::on_huge_pages_at(&mut plan, h.dir());
                    Some(h)
                }
                Err(why) => {
                    eprintln!("shoal-bench: T9 uses the ini's huge_pages_path ({why})");
                    None
                }
            };
            let outcome = runs::run_all(&shoal, &plan, save.as_mut().map(|w| w as &mut dyn Write), &signal);
            if let Some(h) = &huge
                && outcome.as_ref().is_err_and(|e| e.is::<runs::Interrupted>())
            {
                eprintln!("shoal-bench: giving back the {} huge pages and unmounting {}", h.added(), h.dir().display());
            }
            drop(huge);
            let outcome = outcome?;
            if let Some(mut w) = save {
                w.flush().context("writing --save")?;
            }
            outcome
        }
    };
    let targets = targets::evaluate(&Rows(outcome.rows));
    let (pass, fail, unmeasured) =
        [Status::Pass, Status::Fail, Status::NotMeasured].map(|s| targets::count(&targets, s)).into();
    let all_pass = pass == targets.len() && outcome.failures.is_empty();
    let mut out = std::io::stdout().lock();
    if args.json {
        for t in &targets {
            writeln!(out, "{}", t.to_json())?;
        }
        let summary = json!({
            "summary": "targets", "pass": pass, "fail": fail, "not_measured": unmeasured,
            "failed_runs": outcome.failures, "all_pass": all_pass,
        });
        writeln!(out, "{summary}")?;
    } else {
        writeln!(
            out,
            "-- targets (shoal vs the baseline ring of the same run for T1-T4 and T7, vs 1 subscriber for T5 and S6, vs \
             the strongest reference of the same run for S1-S5; ping-pong, streams, S3 and S5: the median of 3 runs; \
             value = worst over sizes)"
        )?;
        for t in &targets {
            writeln!(out, "{}", t.to_text())?;
        }
        writeln!(out, "{pass} of {} pass, {fail} FAIL, {unmeasured} NOT MEASURED", targets.len())?;
        for f in &outcome.failures {
            writeln!(out, "failed run: {f}")?;
        }
        writeln!(out, "{}", if all_pass { "result: PASS" } else { "result: FAIL" })?;
    }
    Ok(all_pass)
}
