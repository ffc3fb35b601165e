//! eCAL 6.1.1's C++ programs of `bench/ecal-cpp/` (built by `scripts/ecal-cpp` against the eclipse-ecal wheel's
//! `libecal_core.so.6`): where they are, and the publish/subscribe ping-pong `--pingpong --against ecal` runs after
//! shoal's block-mode ping-pong. `shoal-ecal-pingpong` measures eCAL as [`super::pingpong`] measures shoal (copy in
//! by `CPublisher::Send` of a buffer, copy out in the receive callback, which wakes the measuring thread: eCAL's
//! block mode) over eCAL's shared-memory layer with its default configuration, with the same warm-up and round trips
//! per size, and prints a JSON line per size; its rows are `system: ecal-cpp, transport: shm`.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde_json::Value;

use super::Run;
use super::args::{PerfArgs, System, WaitMode};
use super::report::{Reporter, program_row};

/// The ping-pong program's name in its directory.
pub(crate) const PINGPONG: &str = "shoal-ecal-pingpong";

/// The `transport` label of its rows.
const LABEL: &str = "shm";

/// The directory of the eCAL C++ programs: `--ecal-cpp`, `$SHOAL_ECAL_CPP`, else `../ecal-cpp/bin` beside this
/// executable (`target/ecal-cpp/bin`, where `scripts/ecal-cpp` puts them); an error saying how to build them when
/// one of `programs` is not there.
pub(crate) fn dir(args: &PerfArgs, programs: &[&str]) -> anyhow::Result<PathBuf> {
    let dir = match (&args.ecal_cpp, std::env::var_os("SHOAL_ECAL_CPP")) {
        (Some(d), _) => d.clone(),
        (None, Some(d)) => PathBuf::from(d),
        (None, None) => {
            let exe = std::env::current_exe().context("cannot find this executable")?;
            exe.parent().and_then(Path::parent).map(|p| p.join("ecal-cpp/bin")).context("no parent directory")?
        }
    };
    for prog in programs {
        if !dir.join(prog).is_file() {
            bail!(
                "the eCAL C++ reference is not built: no {} (build it with scripts/ecal-cpp, which needs g++ and \
                 downloads eCAL 6.1.1's headers, then give its last output line as --ecal-cpp or $SHOAL_ECAL_CPP)",
                dir.join(prog).display()
            );
        }
    }
    Ok(dir)
}

/// Runs eCAL's ping-pong for every size of the run and reports its rows (with shoal's block-mode rows' ratios).
pub(crate) fn pingpong(run: &Run, dir: &Path, rep: &mut Reporter) -> anyhow::Result<()> {
    let args = run.args;
    let sizes = args.sizes();
    let list = |f: &dyn Fn(usize) -> String| sizes.iter().map(|&s| f(s)).collect::<Vec<_>>().join(",");
    let exe = dir.join(PINGPONG);
    let mut cmd = Command::new(&exe);
    cmd.args(["--sizes", &list(&|s| s.to_string())])
        .args(["--warmups", &list(&|s| args.warmup_for(s).to_string())])
        .args(["--iterations", &list(&|s| args.iterations_for(s).to_string())]);
    if let Some(c) = run.peer_cpu(0) {
        cmd.args(["--cpu", "0", "--peer-cpu", &c.to_string()]);
    }
    rep.note(&format!(
        "-- eCAL 6.1.1 C++: {PINGPONG} (CPublisher / CSubscriber with eCAL's default configuration: its shared-memory \
         layer, one memory file per publisher; copy in by Send of a buffer, copy out in the receive callback, which \
         wakes the measuring thread), wait=block"
    ));
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    // eCAL writes notes of its own to stderr (configuration, time sync module): kept for an error, else dropped.
    let mut stderr = child.stderr.take().context("eCAL ping-pong stderr")?;
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let out = BufReader::new(child.stdout.take().context("eCAL ping-pong stdout")?);
    let mut rows = Vec::new();
    let mut failure = None;
    for line in out.lines() {
        let line = line.context("reading the eCAL ping-pong's output")?;
        let v: Value =
            serde_json::from_str(&line).with_context(|| format!("the eCAL ping-pong program printed {line:?}"))?;
        if v.get("event").and_then(Value::as_str) == Some("error") {
            failure = Some(v.get("error").and_then(Value::as_str).unwrap_or("?").to_string());
            continue;
        }
        let mut m = program_row(System::EcalCpp, LABEL, WaitMode::Block, &v)
            .with_context(|| format!("incomplete eCAL ping-pong row {line}"))?;
        if let Some(lost) = v.get("warmup_lost").and_then(Value::as_u64) {
            m.extra.push(("warmup_lost", lost as f64));
        }
        rows.push(m);
    }
    let status = child.wait().context("waiting for the eCAL ping-pong program")?;
    let stderr = errors.join().unwrap_or_default();
    if !status.success() || rows.len() != sizes.len() {
        bail!(
            "the eCAL C++ ping-pong ({}) exited with {status} after {} of {} sizes: {}\n{}",
            exe.display(),
            rows.len(),
            sizes.len(),
            failure.as_deref().unwrap_or("no error line"),
            stderr.trim_end()
        );
    }
    rep.report_ecal(rows);
    Ok(())
}
