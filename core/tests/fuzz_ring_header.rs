//! The `ring_header` fuzz target reaches the ring reader: its body (`fuzz/harness/ring_header.rs`, included here as
//! the target includes it) runs every committed seed, with the target's oracle, and the seeds made from real
//! writers open readers that read samples, follow a generation, count unpublished samples and settle.

#[path = "../../fuzz/harness/ring_header.rs"]
mod harness;

use harness::Run;

fn seed(name: &str) -> Vec<u8> {
    let path = format!("{}/../fuzz/seeds/ring_header/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn ring_header_seeds_reach_the_reader() {
    let dir = format!("{}/../fuzz/seeds/ring_header", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let runs: Vec<(String, Run)> = names.iter().map(|n| (n.clone(), harness::run(&seed(n)))).collect();
    let run = |name: &str| runs.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no seed {name}")).1;
    let opened = |samples, followed, ended, drops| Run { opened: true, samples, torn: 0, followed, ended, drops };

    // A ring of 2 slots written three times: the rewind reaches the newest sample only.
    assert_eq!(run("three_samples"), opened(1, 0, false, 0));
    assert_eq!(run("empty_ring"), opened(0, 0, false, 0));
    // Opened on a superseded generation 0, the reader lands on generation 1 at its end; the rewind reaches the
    // sample written there by the growth (the `more` variant does not rewind).
    assert_eq!(run("superseded_chain"), opened(1, 0, false, 0));
    assert_eq!(run("superseded_chain_more"), opened(0, 0, false, 0));
    // Patched after opening: superseded, the reader follows to generation 1 and reads its sample; the two samples
    // counted but never published are dropped and the reader ends (no successor); slots ahead of the write sequence
    // read as nothing; a write sequence beyond any writer detaches the reader.
    assert_eq!(run("superseded_after_open"), opened(1, 1, false, 0));
    assert_eq!(run("superseded_unpublished"), opened(0, 0, true, 2));
    assert_eq!(run("slots_ahead_of_write_seq"), opened(0, 0, false, 0));
    assert_eq!(run("write_seq_beyond_any_writer"), opened(0, 0, true, 1));
    // A regression input of an older layout (too small for today's header) still runs through the target.
    assert!(!run("regress_write_seq_overflow").opened);

    // Nothing is left in /dev/shm.
    let prefix = format!("shoal_{}_fz", std::process::id());
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
