//! iceoryx2 beside the plain rings of `--baseline`: the ping-pong program of `bench/iceoryx2/` (built by
//! `scripts/iceoryx2` outside the workspace) measures iceoryx2 0.10's publish/subscribe as [`super::pingpong`]
//! measures shoal (copy into a loan, copy out; spin, or block on an iceoryx2 event), with the same warm-up, round
//! trips and histogram, and prints a JSON line per size; its rows are `system: baseline, transport: iceoryx2`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde_json::Value;

use super::Run;
use super::args::{Mode, PerfArgs};
use super::report::{Reporter, program_row};

/// The program's name in its directory.
const PROGRAM: &str = "shoal-iceoryx2-bench";

/// The `transport` label of its rows.
pub(crate) const LABEL: &str = "iceoryx2";

/// The directory of the iceoryx2 program: `--iceoryx2` or `$SHOAL_ICEORYX2` (an error when the program is not
/// there), else `../iceoryx2-bench/bin` beside this executable (`None` with a note when it is not built).
pub(crate) fn locate(args: &PerfArgs, rep: &mut Reporter) -> anyhow::Result<Option<PathBuf>> {
    let given = args.iceoryx2.clone().or_else(|| std::env::var_os("SHOAL_ICEORYX2").map(PathBuf::from));
    let dir = match &given {
        Some(d) => d.clone(),
        None => {
            let exe = std::env::current_exe().context("cannot find this executable")?;
            exe.parent().and_then(Path::parent).map(|p| p.join("iceoryx2-bench/bin")).context("no parent directory")?
        }
    };
    if dir.join(PROGRAM).is_file() {
        return Ok(Some(dir));
    }
    if given.is_some() {
        bail!(
            "the iceoryx2 reference is not built: no {} (build it with scripts/iceoryx2, which compiles iceoryx2 \
             0.10 from crates.io, then give its last output line as --iceoryx2 or $SHOAL_ICEORYX2)",
            dir.join(PROGRAM).display()
        );
    }
    rep.note(&format!(
        "-- iceoryx2: not built ({} missing; scripts/iceoryx2 builds it): no iceoryx2 rows",
        dir.display()
    ));
    Ok(None)
}

/// Runs the iceoryx2 ping-pong for `sizes` (copying ping-pong only) and reports its rows.
pub(crate) fn run(run: &Run, dir: &Path, modes: &[Mode], sizes: &[usize], rep: &mut Reporter) -> anyhow::Result<()> {
    if !modes.contains(&Mode::PingPong) {
        return Ok(());
    }
    let args = run.args;
    let list = |f: &dyn Fn(usize) -> String| sizes.iter().map(|&s| f(s)).collect::<Vec<_>>().join(",");
    let mut cmd = Command::new(dir.join(PROGRAM));
    cmd.args(["--wait", run.wait.as_str()])
        .args(["--sizes", &list(&|s| s.to_string())])
        .args(["--warmups", &list(&|s| args.warmup_for(s).to_string())])
        .args(["--iterations", &list(&|s| args.iterations_for(s).to_string())]);
    if let Some(c) = run.peer_cpu(0) {
        cmd.args(["--cpu", "0", "--peer-cpu", &c.to_string()]);
    }
    rep.note(&format!(
        "-- baseline iceoryx2: {PROGRAM} (iceoryx2 0.10 publish/subscribe, copy into a loan, copy out; {}), wait={}",
        if run.wait.as_str() == "spin" { "busy polling" } else { "an iceoryx2 event wakes the subscriber" },
        run.wait
    ));
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", dir.join(PROGRAM).display()))?;
    let out = BufReader::new(child.stdout.take().context("iceoryx2 program stdout")?);
    let mut rows = 0;
    for line in out.lines() {
        let line = line.context("reading the iceoryx2 program's output")?;
        let v: Value = serde_json::from_str(&line).with_context(|| format!("the iceoryx2 program printed {line:?}"))?;
        rep.report(
            program_row(run.system, LABEL, run.wait, &v).with_context(|| format!("incomplete iceoryx2 row {line}"))?,
        );
        rows += 1;
    }
    let status = child.wait().context("waiting for the iceoryx2 program")?;
    if !status.success() || rows != sizes.len() {
        bail!("the iceoryx2 program exited with {status} after {rows} of {} sizes (its error is above)", sizes.len());
    }
    Ok(())
}
