//! The `flatbuf_view` fuzz target reaches `shoal topic echo`'s FlatBuffers view: its body
//! (`fuzz/harness/flatbuf_view.rs`, which compiles `tools/src/flatbuf.rs` as the target does) runs every committed
//! seed with the target's oracle, and the seeds (laid out as flatc and planus lay a buffer out) are viewed.

#[path = "../../fuzz/harness/flatbuf_view.rs"]
mod harness;

use harness::Run;

#[test]
fn flatbuf_view_seeds_are_viewed() {
    let dir = format!("{}/../fuzz/seeds/flatbuf_view", env!("CARGO_MANIFEST_DIR"));
    let run = |name: &str| {
        let path = format!("{dir}/{name}");
        harness::run(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
    };
    // examples/fbs/pose.fbs's Pose: 6 fields, frame_id a string.
    assert_eq!(run("pose"), Run { viewed: true, fields: 6, strings: 1 });
    assert_eq!(run("sparse"), Run { viewed: true, fields: 2, strings: 1 });
    assert_eq!(run("empty_table"), Run { viewed: true, fields: 0, strings: 0 });
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let _ = run(&name);
    }
}
