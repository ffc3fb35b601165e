//! `shoal play` and `shoal info` on hostile MCAP files made here byte by byte: a zstd bomb, many large schemas,
//! 70,000 channel records, megabytes of metadata. Each run's peak resident memory (the child's `ru_maxrss` from
//! `wait4`) is measured and bounded: the limits of `tools/src/mcap_read.rs`, not the file, decide it.

mod support;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use shoal_tools::mcap_read::MAGIC;
use support::topic;

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

/// A path in the test's temp directory, unique to this process.
fn temp_file(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}_{}.mcap", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn string(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

fn record(opcode: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![opcode];
    v.extend_from_slice(&(body.len() as u64).to_le_bytes());
    v.extend_from_slice(body);
    v
}

fn schema(id: u16, name: &str, data: &[u8]) -> Vec<u8> {
    let mut b = id.to_le_bytes().to_vec();
    b.extend(string(name));
    b.extend(string("shoal.test"));
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(data);
    record(0x03, &b)
}

fn channel(id: u16, schema_id: u16, topic: &str) -> Vec<u8> {
    let mut b = id.to_le_bytes().to_vec();
    b.extend_from_slice(&schema_id.to_le_bytes());
    b.extend(string(topic));
    b.extend(string("raw"));
    b.extend_from_slice(&0u32.to_le_bytes());
    record(0x04, &b)
}

fn message(channel_id: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let t = 1_700_000_000_000_000_000u64 + u64::from(seq);
    let mut b = channel_id.to_le_bytes().to_vec();
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(&t.to_le_bytes());
    b.extend_from_slice(&t.to_le_bytes());
    b.extend_from_slice(payload);
    record(0x05, &b)
}

fn metadata(name: &str, entries: &[(&str, &str)]) -> Vec<u8> {
    let mut map = Vec::new();
    for (k, v) in entries {
        map.extend(string(k));
        map.extend(string(v));
    }
    let mut b = string(name);
    b.extend_from_slice(&(map.len() as u32).to_le_bytes());
    b.extend(map);
    record(0x0C, &b)
}

/// A chunk record holding `compressed` (zstd), declaring `declared` uncompressed bytes (CRC 0: not checked).
fn zstd_chunk(declared: u64, compressed: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&1_700_000_000_000_000_000u64.to_le_bytes());
    b.extend_from_slice(&1_700_000_000_000_000_000u64.to_le_bytes());
    b.extend_from_slice(&declared.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend(string("zstd"));
    b.extend_from_slice(&(compressed.len() as u64).to_le_bytes());
    b.extend_from_slice(compressed);
    record(0x06, &b)
}

/// A zstd chunk holding `records`, declaring their true size.
fn chunk_of(records: &[u8]) -> Vec<u8> {
    zstd_chunk(records.len() as u64, &zstd::bulk::compress(records, 3).expect("compress"))
}

/// `n` zero bytes compressed with zstd, compressed as a stream (never all in memory).
fn zstd_zeros(n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    zstd::stream::copy_encode(std::io::repeat(0).take(n), &mut out, 1).expect("compress");
    out
}

/// A whole file: magic, header, `body`, data end, a footer without summary, magic.
fn mcap_file(body: &[u8]) -> Vec<u8> {
    let mut f = MAGIC.to_vec();
    let mut h = string("");
    h.extend(string("shoal test"));
    f.extend(record(0x01, &h));
    f.extend_from_slice(body);
    f.extend(record(0x0F, &0u32.to_le_bytes()));
    f.extend(record(0x02, &[0u8; 20]));
    f.extend_from_slice(MAGIC);
    f
}

/// Runs `shoal args` (with `--json`) to its end: its output, its JSON summary, and its peak resident memory in KiB
/// (the `peak_rss_kb` of the summary: VmHWM of the process; `wait4`'s `ru_maxrss` would count this test process
/// too, which the child was forked from).
fn run_measured(args: &[&str]) -> (Output, Value, u64) {
    let out = Command::new(SHOAL).args(args).stdin(Stdio::null()).output().expect("run shoal");
    let v = json_of(&out);
    let kb = v["peak_rss_kb"].as_u64().unwrap_or_else(|| panic!("no peak_rss_kb in {v}"));
    assert!(kb > 0, "{v}");
    (out, v, kb)
}

/// The last JSON line of `out`'s stdout.
fn json_of(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v = stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).next_back();
    v.unwrap_or_else(|| panic!("no JSON on stdout; stderr: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Peak memory of `shoal info` and `shoal play` on a small valid file: the baseline the bounds are above.
fn baseline_kb(dir_name: &str) -> (u64, u64) {
    let file = temp_file(dir_name);
    let t = topic("baseline");
    let mut body = channel(1, 0, &t);
    body.extend(message(1, 1, b"hello"));
    std::fs::write(&file, mcap_file(&chunk_of(&body))).expect("write");
    let path = file.to_str().expect("path");
    let (info, _, info_kb) = run_measured(&["info", path, "--json"]);
    assert!(info.status.success(), "{}", String::from_utf8_lossy(&info.stderr));
    let (play, _, play_kb) = run_measured(&["play", path, "--no-wait", "--json"]);
    assert!(play.status.success(), "{}", String::from_utf8_lossy(&play.stderr));
    let _ = std::fs::remove_file(&file);
    (info_kb, play_kb)
}

fn not_panicked(out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked") && !stderr.contains("memory allocation"), "{stderr}");
}

#[test]
fn a_zstd_bomb_is_skipped_and_memory_stays_within_the_record_limit() {
    let (base_info, base_play) = baseline_kb("bomb_baseline");
    let t = topic("bomb");
    let mut good = channel(1, 0, &t);
    for i in 1..=5 {
        good.extend(message(1, i, b"before"));
    }
    let mut after = Vec::new();
    for i in 6..=10 {
        after.extend(message(1, i, b"after"));
    }
    // 1 GiB of zeros in ~40 KiB: one chunk declares 4 GiB (refused before decompressing), one declares 64 MiB and
    // decompresses to more (stopped there), one declares 64 MiB of zeros honestly: 7.4 million empty records.
    let bomb = zstd_zeros(1 << 30);
    let zeros64 = zstd_zeros(64 << 20);
    let mut body = chunk_of(&good);
    body.extend(zstd_chunk(4 << 30, &bomb));
    body.extend(zstd_chunk(64 << 20, &bomb));
    body.extend(zstd_chunk(64 << 20, &zeros64));
    body.extend(chunk_of(&after));
    let file = temp_file("bomb");
    std::fs::write(&file, mcap_file(&body)).expect("write");
    let bytes = std::fs::metadata(&file).expect("stat").len();
    let path = file.to_str().expect("path");

    let (info, v, info_kb) = run_measured(&["info", path, "--json", "--max-record-mb", "100"]);
    not_panicked(&info);
    eprintln!("bomb ({bytes} bytes): shoal info peak {info_kb} KiB (baseline {base_info} KiB): {v}");
    assert_eq!(info.status.code(), Some(1), "damaged: {v}");
    assert_eq!(v["messages"], 10, "{v}");
    let what: Vec<&str> = v["damage"].as_array().expect("damage").iter().filter_map(|d| d["what"].as_str()).collect();
    assert_eq!(what.len(), 3, "{what:?}");
    assert!(what[0].contains("declares 4294967296 uncompressed bytes, above the limit"), "{what:?}");
    assert!(what[1].contains("decompresses to more than the 67108864 bytes it declares"), "{what:?}");
    assert!(what[2].contains("a record inside runs past its end"), "64 MiB of 9-byte empty records: {what:?}");
    // 64 MiB decompressed at most at a time (the zeros chunk), plus the reader's buffers.
    assert!(info_kb < base_info + 64 * 1024 + 32 * 1024, "shoal info peak {info_kb} KiB, baseline {base_info} KiB");

    let (play, v, play_kb) = run_measured(&["play", path, "--no-wait", "--json", "--max-record-mb", "100"]);
    not_panicked(&play);
    eprintln!("bomb: shoal play peak {play_kb} KiB (baseline {base_play} KiB): {v}");
    assert_eq!(play.status.code(), Some(1), "played in part: {v}");
    assert_eq!(v["published"], 10, "the intact chunks before and after the bomb are played: {v}");
    assert_eq!(v["damage"].as_array().expect("damage").len(), 3, "{v}");
    assert!(play_kb < base_play + 64 * 1024 + 32 * 1024, "shoal play peak {play_kb} KiB, baseline {base_play} KiB");

    // A chunk record above --max-record-mb is skipped unread; reading goes on after it.
    let (_, v, _) = run_measured(&["play", path, "--no-wait", "--json", "--max-record-mb", "1"]);
    assert_eq!(v["published"], 10, "{v}");
    let what: Vec<&str> = v["damage"].as_array().expect("damage").iter().filter_map(|d| d["what"].as_str()).collect();
    assert!(what.iter().filter(|w| w.contains("above the limit")).count() >= 3, "{what:?}");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn many_large_schemas_are_kept_up_to_max_schema_mb() {
    let (base_info, base_play) = baseline_kb("schemas_baseline");
    // 1000 chunks, each with a 1 MiB schema and a channel using it: 1000 MiB of schemas in a 1 MB file.
    let t = topic("schemaless");
    let big = vec![0u8; 1 << 20];
    let mut body = Vec::new();
    let mut first = channel(1, 0, &t);
    first.extend(message(1, 1, b"played"));
    body.extend(chunk_of(&first));
    for id in 2..1002u16 {
        let mut c = schema(id, &format!("shoal.test.Big{id}"), &big);
        c.extend(channel(id, id, &format!("{}_{id}", topic("big"))));
        c.extend(message(id, u32::from(id), b"x"));
        body.extend(chunk_of(&c));
    }
    let file = temp_file("schemas");
    std::fs::write(&file, mcap_file(&body)).expect("write");
    let bytes = std::fs::metadata(&file).expect("stat").len();
    let path = file.to_str().expect("path");

    let (info, v, info_kb) = run_measured(&["info", path, "--json", "--max-schema-mb", "32"]);
    not_panicked(&info);
    eprintln!("schemas ({bytes} bytes): shoal info peak {info_kb} KiB (baseline {base_info} KiB): {}", v["skipped"]);
    assert!(info.status.success(), "{}", String::from_utf8_lossy(&info.stderr));
    let kept = v["channels"].as_array().expect("channels").len();
    let skipped_schemas = v["skipped"]["schemas"].as_u64().expect("skipped schemas");
    assert!((30..=33).contains(&kept), "about 31 schemas of 1 MiB fit 32 MiB, with their channels: {kept}");
    assert_eq!(skipped_schemas as usize + kept - 1, 1000, "{}", v["skipped"]);
    assert_eq!(v["skipped"]["channels_of_skipped_schemas"], skipped_schemas, "{}", v["skipped"]);
    assert!(info_kb < base_info + 32 * 1024 + 16 * 1024, "shoal info peak {info_kb} KiB, baseline {base_info} KiB");

    // Played: the schema-less topic (the others carry megabyte descriptors, not announced in a test).
    let (play, v, play_kb) = run_measured(&["play", path, "--no-wait", "--json", "--topics", &t]);
    not_panicked(&play);
    eprintln!("schemas: shoal play peak {play_kb} KiB (baseline {base_play} KiB): {v}");
    assert_eq!(v["published"], 1, "{v}");
    assert_eq!(v["skipped"]["schemas"], 1000 - 63, "64 MiB by default: {v}");
    assert!(play.status.success(), "the one topic asked for was played: {v}");
    let stderr = String::from_utf8_lossy(&play.stderr);
    assert!(stderr.contains("schemas") && stderr.contains("beyond --max-schema-mb"), "{stderr}");
    assert!(play_kb < base_play + 64 * 1024 + 16 * 1024, "shoal play peak {play_kb} KiB, baseline {base_play} KiB");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn seventy_thousand_channels_play_up_to_max_channels() {
    let (base_info, base_play) = baseline_kb("channels_baseline");
    // 70,000 channel records: ids 1..=65535, then 4,465 more reusing ids with other topics; a message on the first
    // 2,000 channels.
    let prefix = topic("ch");
    let mut body = Vec::new();
    let mut chunk = Vec::new();
    for k in 0..70_000u32 {
        let id = (k % 65_535 + 1) as u16;
        chunk.extend(channel(id, 0, &format!("{prefix}_{k}")));
        if k < 2000 {
            chunk.extend(message(id, k + 1, b"m"));
        }
        if chunk.len() > 256 << 10 {
            body.extend(chunk_of(&chunk));
            chunk.clear();
        }
    }
    body.extend(chunk_of(&chunk));
    let file = temp_file("channels");
    std::fs::write(&file, mcap_file(&body)).expect("write");
    let bytes = std::fs::metadata(&file).expect("stat").len();
    let path = file.to_str().expect("path");

    let (info, v, info_kb) = run_measured(&["info", path, "--json"]);
    not_panicked(&info);
    eprintln!(
        "channels ({bytes} bytes): shoal info peak {info_kb} KiB (baseline {base_info} KiB), {} channels",
        v["channels"].as_array().map_or(0, Vec::len)
    );
    assert!(info.status.success(), "{}", String::from_utf8_lossy(&info.stderr));
    assert_eq!(v["channels"].as_array().expect("channels").len(), 65_535, "the first definition of each id");
    assert_eq!(v["messages"], 2000);
    // The catalog (65,535 channels) and their JSON description.
    assert!(info_kb < base_info + 192 * 1024, "shoal info peak {info_kb} KiB, baseline {base_info} KiB");
    let (_, v, _) = run_measured(&["info", path, "--json", "--max-channels", "100"]);
    assert_eq!(v["channels"].as_array().expect("channels").len(), 100, "{}", v["skipped"]);
    assert_eq!(v["skipped"]["channels_over_max_channels"], 65_435, "{}", v["skipped"]);

    let (play, v, play_kb) = run_measured(&["play", path, "--no-wait", "--json"]);
    not_panicked(&play);
    eprintln!("channels: shoal play peak {play_kb} KiB (baseline {base_play} KiB): {}", v["skipped"]);
    assert_eq!(play.status.code(), Some(1), "played in part");
    assert_eq!(v["published"], 256, "one message on each of the first 256 channels: {}", v["skipped"]);
    assert_eq!(v["topics"].as_array().expect("topics").len(), 256);
    assert_eq!(v["skipped"]["channels_over_max_channels"], 65_535 - 256, "{}", v["skipped"]);
    assert_eq!(v["skipped"]["messages"], 2000 - 256, "{}", v["skipped"]);
    let stderr = String::from_utf8_lossy(&play.stderr);
    assert!(
        stderr.contains("65279 channels beyond --max-channels (256) were skipped (1744 messages on them)"),
        "{stderr}"
    );
    // 256 publishers, each with its shared-memory ring (about 1.3 MB each with the default ring).
    assert!(play_kb < base_play + 448 * 1024, "shoal play peak {play_kb} KiB, baseline {base_play} KiB");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn metadata_beyond_16_mib_is_counted_not_kept() {
    let (base_info, _) = baseline_kb("metadata_baseline");
    let value = "v".repeat(1 << 20);
    let mut body = Vec::new();
    for i in 0..40 {
        body.extend(metadata(&format!("m{i}"), &[("k", &value)]));
    }
    let file = temp_file("metadata");
    std::fs::write(&file, mcap_file(&body)).expect("write");
    let path = file.to_str().expect("path");
    let (info, v, info_kb) = run_measured(&["info", path, "--json"]);
    not_panicked(&info);
    eprintln!("metadata: shoal info peak {info_kb} KiB (baseline {base_info} KiB): {}", v["metadata_not_kept"]);
    assert!(info.status.success(), "{}", String::from_utf8_lossy(&info.stderr));
    let kept = v["metadata"].as_array().expect("metadata").len() as u64;
    assert_eq!(kept, 15, "16 MiB of 1 MiB records");
    assert_eq!(v["metadata_not_kept"]["records"], 40 - kept);
    // 16 MiB kept, and their JSON form.
    assert!(info_kb < base_info + 64 * 1024, "shoal info peak {info_kb} KiB, baseline {base_info} KiB");
    let _ = std::fs::remove_file(&file);
}
