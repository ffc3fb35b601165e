//! What the bridges' `main` sets up before it runs: log output and the stop flag.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Log lines on stderr (stdout carries the bridges' JSON lines), filtered by `RUST_LOG`, `info` without it.
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
}

/// A flag that SIGTERM or SIGINT sets: the bridge, which polls it, then stops cleanly (its final statistics, its
/// routes closed). A further signal sets it again and does nothing else.
pub fn stop_on_signals() -> std::io::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    Ok(stop)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn sigterm_sets_the_flag_and_the_process_goes_on() {
        let stop = stop_on_signals().expect("handlers");
        assert!(!stop.load(Ordering::Relaxed));
        signal_hook::low_level::raise(signal_hook::consts::SIGTERM).expect("raise");
        assert!(stop.load(Ordering::Relaxed), "the handler ran before raise returned");
    }
}
