//! `shoal_tools::mcap_read` as `shoal info` and `shoal play` read a file: its summary (`read_summary`), then every
//! record from start to end (`read_records`), schemas and channels learnt by a `Catalog`, with small limits.
//!
//! Input: byte 0 chooses the mode.
//! - Even: the rest is the file.
//! - Odd: the rest drives the `mcap` crate's writer (compression none, zstd or lz4, chunked or not, a chunk size,
//!   up to 4 channels with or without a schema, up to 64 messages, a metadata record). The file written is read
//!   back: exactly the messages written, in order, the metadata record, an intact summary, no damage. Then the same
//!   file with one byte changed (position and value from the input) is read like any other.
//!
//! Oracles besides "never panics, never allocates what the file declares":
//! - a record given is never above the record limit (a message's payload, a schema's data);
//! - the catalog keeps at most `max_channels` channels and charges at most `max_catalog_bytes`;
//! - at most `MAX_DAMAGE_LISTED` damaged parts are described;
//! - the summary, when it reads, agrees with the catalog limits too.
#![no_main]

use std::io::Cursor;

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use shoal_tools::mcap_read::{Catalog, Limits, MAX_DAMAGE_LISTED, Rec, read_records, read_summary};

fn limits() -> Limits {
    Limits { max_record: 1 << 20, max_channels: 16, max_catalog_bytes: 256 << 10, max_metadata_bytes: 64 << 10 }
}

/// Reads `file` as `shoal info` does; returns the messages (channel id, log time, payload) and metadata names read,
/// and whether anything was damaged.
fn read(file: &[u8]) -> (Vec<(u16, u64, Vec<u8>)>, Vec<String>, bool) {
    let limits = limits();
    if let Ok(Some((catalog, _))) = read_summary(Cursor::new(file), &limits, &[]) {
        check_catalog(&catalog, &limits);
    }
    let mut catalog = Catalog::new(&limits, &[]);
    let (mut messages, mut metadata) = (Vec::new(), Vec::new());
    let damage = read_records(Cursor::new(file), &limits, |r| {
        match r {
            Rec::Message { channel_id, log_time, data, .. } => {
                assert!(data.len() as u64 <= limits.max_record);
                messages.push((channel_id, log_time, data.to_vec()));
            }
            Rec::Schema { data, .. } => assert!(data.len() as u64 <= limits.max_record),
            Rec::Metadata { name, metadata: m } => {
                assert!(m.byte_len() as u64 <= limits.max_record);
                assert_eq!(m.iter().count(), m.len());
                metadata.push(name.to_owned());
            }
            _ => {}
        }
        catalog.learn(&r);
        true
    })
    .expect("reading from memory does not fail");
    check_catalog(&catalog, &limits);
    assert!(damage.list.len() <= MAX_DAMAGE_LISTED);
    (messages, metadata, !damage.is_empty())
}

fn check_catalog(c: &Catalog, limits: &Limits) {
    assert!(c.channels.len() <= limits.max_channels, "{} channels kept", c.channels.len());
    assert!(c.bytes() <= limits.max_catalog_bytes, "{} bytes charged", c.bytes());
    let kept: usize = c.schemas.values().map(|s| s.data.len()).sum();
    assert!(kept <= limits.max_catalog_bytes, "{kept} bytes of schemas kept");
}

/// Writes a file with the `mcap` crate as the input says, reads it back, then reads it with one byte changed.
fn written(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let compression = match u.int_in_range(0..=2u8)? {
        0 => None,
        1 => Some(mcap::Compression::Zstd),
        _ => Some(mcap::Compression::Lz4),
    };
    let options = mcap::WriteOptions::new()
        .compression(compression)
        .use_chunks(u.arbitrary()?)
        .chunk_size(Some(u.int_in_range(1..=4096u64)?));
    let Ok(mut w) = options.create(Cursor::new(Vec::new())) else { return Ok(()) };
    let mut channels = Vec::new();
    for i in 0..u.int_in_range(1..=4u8)? {
        let schema = if u.arbitrary()? {
            let data: Vec<u8> = u.arbitrary()?;
            w.add_schema(&format!("schema{i}"), "protobuf", &data).expect("schema")
        } else {
            0
        };
        let topic: String = u.arbitrary()?;
        let key: String = u.arbitrary()?;
        let meta = [(key, u.arbitrary::<String>()?)].into_iter().collect();
        channels.push(w.add_channel(schema, &topic, "raw", &meta).expect("channel"));
    }
    let mut sent = Vec::new();
    for seq in 0..u.int_in_range(0..=64u32)? {
        let channel_id = *u.choose(&channels)?;
        let log_time: u64 = u.arbitrary()?;
        let len = u.int_in_range(0..=300usize)?;
        let payload = u.bytes(len)?.to_vec();
        let header = mcap::records::MessageHeader { channel_id, sequence: seq, log_time, publish_time: log_time };
        w.write_to_known_channel(&header, &payload).expect("message");
        sent.push((channel_id, log_time, payload));
    }
    let name: String = u.arbitrary()?;
    w.write_metadata(&mcap::records::Metadata { name: name.clone(), metadata: Default::default() }).expect("meta");
    w.finish().expect("finish");
    let mut file = w.into_inner().into_inner();
    let summary = read_summary(Cursor::new(&file), &limits(), &[]).expect("the summary reads").expect("a summary");
    channels.sort_unstable();
    channels.dedup();
    assert_eq!(summary.0.channels.len(), channels.len(), "the channels written (equal ones are one)");
    let (messages, metadata, damaged) = read(&file);
    assert!(!damaged, "a file the mcap crate wrote reads without damage");
    assert_eq!(messages, sent, "the messages written, in order");
    assert_eq!(metadata, [name]);
    let at = u.choose_index(file.len())?;
    file[at] ^= u.int_in_range(1..=255u8)?;
    read(&file);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode % 2 == 0 {
        read(rest);
    } else {
        let _ = written(&mut Unstructured::new(rest));
    }
});
