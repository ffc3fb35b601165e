//! The demo's command line: `--help` prints its usage, a bad argument says which and what is expected, in one
//! message without a backtrace (even with `RUST_BACKTRACE=1`).

use std::process::Command;

const DEMO: &str = env!("CARGO_BIN_EXE_demo");

#[test]
fn help_prints_the_usage() {
    let out = Command::new(DEMO).arg("--help").output().expect("run demo");
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("usage: demo [SECONDS [RATE_HZ [SIZE_BYTES]]]"));
}

#[test]
fn a_bad_argument_is_named_without_a_backtrace() {
    for (args, expected) in [
        (&["x"][..], "SECONDS must be a whole number of seconds, not \"x\""),
        (&["1", "fast"][..], "RATE_HZ must be messages per second"),
        (&["1", "10", "4"][..], "SIZE_BYTES must be at least 8"),
        (&["1", "-5"][..], "RATE_HZ must be a positive number"),
    ] {
        let out = Command::new(DEMO).args(args).env("RUST_BACKTRACE", "1").output().expect("run demo");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.starts_with(&format!("demo: {expected}")), "{args:?}: {err}");
        assert!(err.contains("usage: demo"), "{args:?}: {err}");
        assert!(!err.contains("backtrace") && !err.contains("invalid digit"), "{args:?}: {err}");
    }
}
