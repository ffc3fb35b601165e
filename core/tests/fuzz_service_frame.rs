//! The `service_frame` fuzz target reaches the service protocol's decoders: its body (`fuzz/harness/service_frame.rs`,
//! included here as the target includes it) runs every committed seed with the target's oracle, and the seeds (a
//! client's and a server's stream, odd header sizes, a frame over the bound) give the frames and messages they hold.

#[path = "../../fuzz/harness/service_frame.rs"]
mod harness;

use harness::Run;

#[test]
fn service_frame_seeds_reach_the_decoders() {
    let dir = format!("{}/../fuzz/seeds/service_frame", env!("CARGO_MANIFEST_DIR"));
    let run = |name: &str| {
        let path = format!("{dir}/{name}");
        harness::run(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
    };
    // Handshake request, then a request that decodes.
    assert_eq!(run("client_stream"), Run { frames: 2, too_large: false, messages: 1 });
    // Handshake response, then a response that decodes.
    assert_eq!(run("server_stream"), Run { frames: 2, too_large: false, messages: 1 });
    // A 20-byte header (skipped rest) and an 8-byte one read as 16: both frames.
    assert_eq!(run("odd_header_sizes").frames, 2);
    // One frame within the 16-byte bound, then one announcing 1000 bytes: an error, nothing allocated for it.
    assert_eq!(run("over_the_bound"), Run { frames: 1, too_large: true, messages: 0 });
}
