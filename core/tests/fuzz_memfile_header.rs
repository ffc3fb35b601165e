//! The `memfile_header` fuzz target reaches the eCAL memfile reader: its body (`fuzz/harness/memfile_header.rs`,
//! included here as the target includes it) runs every committed seed with the target's oracle, and the seeds
//! (memfiles as eCAL writes them) are read: messages, a newer one, nothing new, a grown file, a truncation survived.

#[path = "../../fuzz/harness/memfile_header.rs"]
mod harness;

use harness::Run;

#[test]
fn memfile_header_seeds_reach_the_reader() {
    let dir = format!("{}/../fuzz/seeds/memfile_header", env!("CARGO_MANIFEST_DIR"));
    let run = |name: &str| {
        let path = format!("{dir}/{name}");
        harness::run(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
    };
    let mut names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    for name in &names {
        assert!(run(name).opened, "{name} was not opened");
    }
    let read = |messages, empty, errors, truncations| Run { opened: true, messages, empty, errors, truncations };
    // Clock 1, then the writer's clock 2, then nothing newer (the last read after the steps).
    assert_eq!(run("two_messages"), read(2, 2, 0, 0));
    assert_eq!(run("ecal58_header"), read(1, 1, 0, 0));
    // The message written after the file grew past the first mapping is read from a new one.
    assert_eq!(run("grown"), read(2, 1, 0, 0));
    // The copy faults once (truncated), the reader maps the file again and reads the message, then nothing newer.
    assert_eq!(run("truncated"), read(2, 1, 1, 1));

    let prefix = format!("shoal_{}_fzm", std::process::id());
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
