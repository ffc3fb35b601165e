//! The bridge as two processes: a supervisor and a worker.
//!
//! The process the user starts is the supervisor. It reads and checks the configuration, then starts the same
//! binary again as the worker (environment variable [`WORKER_ENV`] set to the supervisor's pid, the same
//! arguments, so the same routes), which does all the DDS and shoal work under a memory limit
//! ([`Supervision::memory_limit`], `RLIMIT_DATA`). The supervisor does nothing else but wait:
//!
//! - when the worker dies without being asked to (killed by a signal, aborted, a panic: the worker's panic hook
//!   aborts, so a panic on any of its threads, RustDDS's event loop included, is a death and not a half-working
//!   bridge), it logs why with the worker's peak RSS, prints a `worker_exited` event, counts the restart and starts
//!   the worker again after a backoff ([`Supervision::restart_backoff_ms`], doubled per death within
//!   [`Supervision::STABLE`] of a start, at most 32 times);
//! - a worker that exits with a code of its own (other than a panic's 101) could not start: a configuration or
//!   DDS error it printed. Restarting would fail the same way, so the supervisor exits with that code;
//! - SIGTERM / SIGINT to the supervisor are passed to the worker as SIGTERM, which stops it cleanly (final
//!   statistics, shoal unregistered); after [`STOP_GRACE`] it is killed. The worker also gets SIGTERM when the
//!   supervisor dies (`PR_SET_PDEATHSIG`).
//!
//! Why: RustDDS 0.15.1 (the newest release) allocates and zero-fills a DATA_FRAG submessage's declared sample size
//! (`data_size`, a u32) in `AssemblyBuffer::new` (`src/rtps/fragment_assembler.rs`) before checking it against
//! anything, so one UDP packet to any DDS port of the bridge (the SPDP multicast port 7400 will do) makes it
//! allocate up to 4 GiB. Under the limit that allocation fails, the worker aborts ("memory allocation of
//! 4294967280 bytes failed") and is restarted, and the host's memory is never at stake. The upstream fix:
//! `AssemblyBuffer::new` should refuse a `data_size` above the reader's maximum sample size (a QoS or
//! participant setting, as Cyclone's `MaxSampleSize`) and check `data_size` against
//! `fragment_size * total_number_of_fragments` before allocating; better still, allocate the buffer as fragments
//! arrive. With such a release the limit stays as the backstop for any other unbounded allocation.

use std::io;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::bridge::emit;
use crate::config::Supervision;

/// Set in the worker's environment to the supervisor's pid.
pub const WORKER_ENV: &str = "SHOAL_ROS2_BRIDGE_WORKER";

/// How long a worker asked to stop may take before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(15);

/// A panic's exit code (a panic on the main thread before the worker's hook is installed).
const PANIC_CODE: i32 = 101;

/// Errors that stop the supervisor.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// The worker process could not be started.
    #[error("cannot start the worker process {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: io::Error,
    },
    /// Waiting for the worker failed.
    #[error("waiting for the worker (pid {pid}): {source}")]
    Wait {
        /// The worker's pid.
        pid: i32,
        /// Why.
        source: io::Error,
    },
    /// The worker exited with a code of its own: it could not start (its error is above in the log).
    #[error("the worker exited with code {0}: it could not start (see its error above)")]
    WorkerFailed(i32),
}

/// How the worker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

impl Exit {
    fn from_wait_status(status: libc::c_int) -> Exit {
        if libc::WIFSIGNALED(status) {
            Exit::Signal(libc::WTERMSIG(status))
        } else {
            Exit::Code(libc::WEXITSTATUS(status))
        }
    }

    /// Why the worker ended, in words, with what most likely caused it.
    pub fn describe(self, memory_limit: u64) -> String {
        match self {
            Exit::Signal(libc::SIGABRT) => format!(
                "killed by SIGABRT: an aborted worker, most likely an allocation failing under memory_limit = \
                 {memory_limit} bytes (a hostile or broken DDS sample declaring a huge size; the worker's stderr \
                 says \"memory allocation of N bytes failed\"), or a panic"
            ),
            Exit::Signal(libc::SIGKILL) => "killed by SIGKILL (by hand, or the kernel's OOM killer)".into(),
            Exit::Signal(libc::SIGSEGV) => "killed by SIGSEGV (a crash)".into(),
            Exit::Signal(s) => format!("killed by signal {s}"),
            Exit::Code(PANIC_CODE) => "exited with code 101 (a panic)".into(),
            Exit::Code(c) => format!("exited with code {c}"),
        }
    }
}

/// One worker's end.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    /// How.
    pub exit: Exit,
    /// Its peak resident set size, bytes (`ru_maxrss`).
    pub peak_rss_bytes: u64,
    /// How long it ran.
    pub ran: Duration,
}

/// The backoff before restart number `deaths_in_a_row` (1-based) of a worker that keeps dying quickly.
pub fn backoff(sup: &Supervision, deaths_in_a_row: u32) -> Duration {
    let factor = 1u64 << deaths_in_a_row.saturating_sub(1).min(5);
    Duration::from_millis(sup.restart_backoff_ms.saturating_mul(factor))
}

/// Runs the supervisor until `stop` becomes true (then the worker is stopped) or the worker cannot start.
/// Returns the number of restarts.
pub fn run(sup: &Supervision, stop: &AtomicBool) -> Result<u64, SupervisorError> {
    let program = std::env::current_exe()
        .map_err(|source| SupervisorError::Spawn { program: "/proc/self/exe".into(), source })?;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut restarts = 0u64;
    let mut deaths_in_a_row = 0u32;
    loop {
        let started = Instant::now();
        let child = Command::new(&program)
            .args(&args)
            .env(WORKER_ENV, std::process::id().to_string())
            .stdin(Stdio::null())
            .spawn()
            .map_err(|source| SupervisorError::Spawn { program: program.display().to_string(), source })?;
        // The child is reaped with wait4 below (for its rusage), never through `child`.
        let pid = libc::pid_t::try_from(child.id()).unwrap_or(libc::pid_t::MAX);
        drop(child);
        tracing::info!(pid, restarts, memory_limit = sup.memory_limit, "worker started");
        emit(&json!({"event": "worker_started", "pid": pid, "restarts": restarts, "memory_limit": sup.memory_limit}));
        let ended = wait_worker(pid, started, stop)?;
        let asked = stop.load(Ordering::Relaxed);
        match ended.exit {
            Exit::Code(0) if asked => return Ok(restarts),
            Exit::Code(c) if c != 0 && c != PANIC_CODE && !asked => {
                tracing::error!(pid, "the worker exited with code {c}: it could not start");
                return Err(SupervisorError::WorkerFailed(c));
            }
            _ if asked => {
                tracing::warn!(pid, "the worker, asked to stop, {}", ended.exit.describe(sup.memory_limit));
                return Ok(restarts);
            }
            _ => {}
        }
        deaths_in_a_row = if ended.ran >= Supervision::STABLE { 1 } else { deaths_in_a_row.saturating_add(1) };
        restarts += 1;
        let wait = backoff(sup, deaths_in_a_row);
        let why = ended.exit.describe(sup.memory_limit);
        tracing::warn!(
            pid,
            peak_rss_bytes = ended.peak_rss_bytes,
            ran_ms = ended.ran.as_millis() as u64,
            restarts,
            "the worker {why}; restarting it in {} ms",
            wait.as_millis()
        );
        let (code, signal) = match ended.exit {
            Exit::Code(c) => (Some(c), None),
            Exit::Signal(s) => (None, Some(s)),
        };
        emit(&json!({
            "event": "worker_exited", "pid": pid, "cause": why, "exit_code": code, "signal": signal,
            "peak_rss_bytes": ended.peak_rss_bytes, "ran_ms": ended.ran.as_millis() as u64,
            "restarts": restarts, "restart_in_ms": wait.as_millis() as u64,
        }));
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return Ok(restarts);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(restarts);
        }
    }
}

/// Waits for worker `pid` to end; once `stop` is set, asks it to stop (SIGTERM), and kills it after
/// [`STOP_GRACE`].
fn wait_worker(pid: libc::pid_t, started: Instant, stop: &AtomicBool) -> Result<Ended, SupervisorError> {
    let mut asked_at: Option<Instant> = None;
    let mut killed = false;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 on our own child, with pointers to live locals of the right types.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            let peak_rss_bytes = u64::try_from(usage.ru_maxrss).unwrap_or(0).saturating_mul(1024);
            return Ok(Ended { exit: Exit::from_wait_status(status), peak_rss_bytes, ran: started.elapsed() });
        }
        if r < 0 {
            let source = io::Error::last_os_error();
            if source.kind() != io::ErrorKind::Interrupted {
                return Err(SupervisorError::Wait { pid, source });
            }
        }
        if stop.load(Ordering::Relaxed) {
            match asked_at {
                None => {
                    // SAFETY: kill(2) on our own child, not reaped yet (wait4 above did not return it), so the pid
                    // is still that child's.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                    asked_at = Some(Instant::now());
                }
                Some(t) if !killed && t.elapsed() >= STOP_GRACE => {
                    tracing::warn!(pid, "the worker did not stop within {STOP_GRACE:?}: killing it");
                    // SAFETY: as above.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    killed = true;
                }
                Some(_) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// In the worker, before anything else: the memory limit, death with the supervisor, and panics as aborts.
/// `supervisor` is the pid [`WORKER_ENV`] carries.
pub fn enter_worker(sup: &Supervision, supervisor: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number; no pointers.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // The supervisor may have died before the line above: then nobody would stop this worker.
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != supervisor {
        return Err(io::Error::other(format!("the supervisor (pid {supervisor}) is gone")));
    }
    let limit = libc::rlimit { rlim_cur: sup.memory_limit as libc::rlim_t, rlim_max: sup.memory_limit as libc::rlim_t };
    // SAFETY: setrlimit with a pointer to a live rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_DATA, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        // A panic on any thread (RustDDS's event loop, shoal's I/O thread) would leave a bridge that no longer
        // forwards: die instead, and be restarted.
        std::process::abort();
    }));
    Ok(())
}

/// The supervisor's pid when this process is a worker.
pub fn worker_of() -> Option<libc::pid_t> {
    std::env::var(WORKER_ENV).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_32_times() {
        let sup = Supervision { memory_limit: 1 << 30, restart_backoff_ms: 100 };
        let ms: Vec<u128> = (1..=8).map(|n| backoff(&sup, n).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 3200, 3200]);
    }

    #[test]
    fn exits_are_described() {
        let a = Exit::Signal(libc::SIGABRT).describe(1 << 30);
        assert!(a.contains("SIGABRT") && a.contains("memory_limit = 1073741824"), "{a}");
        assert_eq!(Exit::Code(101).describe(0), "exited with code 101 (a panic)");
        // The wait status of a process killed by SIGABRT, and of one that exited with code 3.
        assert_eq!(Exit::from_wait_status(libc::SIGABRT), Exit::Signal(libc::SIGABRT));
        assert_eq!(Exit::from_wait_status(3 << 8), Exit::Code(3));
    }
}
