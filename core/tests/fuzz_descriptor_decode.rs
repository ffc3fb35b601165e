//! The `descriptor_decode` fuzz target reaches the decoders of announced protobuf descriptors: its body
//! (`fuzz/harness/descriptor_decode.rs`, included here as the target includes it) runs every committed seed with the
//! target's oracle, and the seeds (a `FileDescriptorSet` as eCAL announces one, with a payload) decode.

#[path = "../../fuzz/harness/descriptor_decode.rs"]
mod harness;

use harness::Run;

#[test]
fn descriptor_decode_seeds_decode() {
    let dir = format!("{}/../fuzz/seeds/descriptor_decode", env!("CARGO_MANIFEST_DIR"));
    let run = |name: &str| {
        let path = format!("{dir}/{name}");
        harness::run(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
    };
    let all = Run { set: true, decoder: true, message: true, json: true };
    // Nested message, packed doubles, enum, map, oneof, a well-known type and an unknown field.
    assert_eq!(run("imu"), all);
    assert_eq!(run("imu_empty_payload"), all);
    assert_eq!(run("nested_type"), all);
    assert_eq!(run("type_not_in_set"), Run { set: true, ..Run::default() });
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let _ = run(&name);
    }
}
