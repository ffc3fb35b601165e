//! The `log_decode` fuzz target reaches the log message decoder: its body (`fuzz/harness/log_decode.rs`, included
//! here as the target includes it) runs every committed seed with the target's oracle, and the seeds give the records
//! and refusals they hold.

#[path = "../../fuzz/harness/log_decode.rs"]
mod harness;

use harness::Run;

#[test]
fn log_decode_seeds_reach_the_decoder() {
    let dir = format!("{}/../fuzz/seeds/log_decode", env!("CARGO_MANIFEST_DIR"));
    let run = |name: &str| {
        let path = format!("{dir}/{name}");
        harness::run(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
    };
    assert_eq!(run("framed_warning"), Run { records: 1, refused: 0 });
    assert_eq!(run("raw_datagram"), Run { records: 1, refused: 0 });
    // Local mode: another host's message is refused (each of the 4 datagrams the harness splits its 62 bytes into).
    assert_eq!(run("other_host"), Run { records: 0, refused: 4 });
    // Several fragments make one record; then a whole one.
    assert_eq!(run("fragmented_then_later"), Run { records: 2, refused: 0 });
    assert_eq!(run("other_sample_and_bad_message"), Run { records: 0, refused: 2 });
    assert_eq!(run("not_utf8_unknown_level"), Run { records: 1, refused: 0 });
}
