//! The body of the `log_decode` fuzz target: eCAL log messages as `shoal log` and the monitor receive them
//! (`logging::LogDecoder`: ecaludp datagrams, reassembled when fragmented, decoded as `eCAL.pb.LogMessage`), and
//! `logging::decode_record` on raw bytes. Shared (`#[path]`) by `fuzz_targets/log_decode.rs` and
//! `core/tests/fuzz_log_decode.rs`, which runs the committed seeds through it in the test suite.
//!
//! Input format: a sequence of records `[flags u8][len u16 LE][len bytes]` (a short last record takes what is left).
//! `flags` bit 0 set: the bytes are a raw UDP datagram; clear: they are a `LogMessage` payload, framed under
//! `_log_message_` and split into datagrams of at most `16 + len / 3` payload bytes (so long ones are fragmented).
//! Bit 1: the datagrams come from another host (10.0.0.2) instead of 127.0.0.1. Bits 2..=7: time advanced before
//! the record, in units of 100 ms (so incomplete messages expire).
//!
//! Oracle: nothing panics; every datagram is counted, and the decoder's refusals add up to the errors it returned;
//! a record the decoder or `decode_record` yields re-encodes (`encode_record`) to bytes that decode to the same
//! record; when the input holds no raw datagram (nothing interferes with reassembly), a framed payload from this
//! host yields exactly what `decode_record` makes of it, and one from another host is refused as such (local mode).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use shoal::logging::{LOG_SAMPLE_NAME, LogDecodeError, LogDecoder, LogRecord, decode_record, encode_record};
use shoal::wire::encode_message;

/// What one input did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// Records the decoder yielded.
    pub(crate) records: u64,
    /// Datagrams it refused.
    pub(crate) refused: u64,
}

fn records(mut data: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    while let Some((&flags, rest)) = data.split_first() {
        let (len, rest) = match rest.split_first_chunk::<2>() {
            Some((len, rest)) => (usize::from(u16::from_le_bytes(*len)), rest),
            None => (rest.len(), rest),
        };
        let (record, rest) = rest.split_at(len.min(rest.len()));
        out.push((flags, record));
        data = rest;
    }
    out
}

fn round_trip(r: &LogRecord) {
    let again = decode_record(&encode_record(r)).expect("an encoded record decodes");
    assert_eq!(&again, r, "record changed by encode + decode");
}

pub(crate) fn run(data: &[u8]) -> Run {
    let input = records(data);
    let any_raw = input.iter().any(|(flags, _)| flags & 1 == 1);
    let mut decoder = LogDecoder::new(true);
    let mut now = Instant::now();
    let mut id = 1000;
    let mut run = Run::default();
    let mut pushed = 0u64;
    for (flags, bytes) in input {
        now += Duration::from_millis(100 * u64::from(flags >> 2));
        let from: SocketAddr =
            if flags & 2 == 0 { ([127, 0, 0, 1], 40000).into() } else { ([10, 0, 0, 2], 40000).into() };
        let direct = decode_record(bytes);
        if let Ok(r) = &direct {
            round_trip(r);
        }
        let datagrams = if flags & 1 == 1 {
            vec![bytes.to_vec()]
        } else {
            let mut next_id = || {
                id += 1;
                id
            };
            encode_message(LOG_SAMPLE_NAME, bytes, 16 + bytes.len() / 3, &mut next_id)
                .expect("a payload under 64 KiB frames")
        };
        let mut got = None;
        let mut last_err = None;
        for d in &datagrams {
            pushed += 1;
            match decoder.push(now, from, d) {
                Ok(Some(r)) => {
                    round_trip(&r);
                    run.records += 1;
                    got = Some(r);
                }
                Ok(None) => {}
                Err(e) => {
                    run.refused += 1;
                    last_err = Some(e);
                }
            }
        }
        if flags & 1 == 0 && !any_raw {
            if flags & 2 == 0 {
                assert_eq!(got.ok_or(()), direct.map_err(|_| ()), "a framed payload decodes as its bytes do");
            } else {
                assert!(got.is_none());
                assert!(matches!(last_err, Some(LogDecodeError::OtherHost(_))), "{last_err:?}");
            }
        }
    }
    let c = decoder.counters();
    assert_eq!(c.datagrams, pushed, "every datagram counted");
    assert_eq!(c.records, run.records);
    assert_eq!(c.malformed + c.other_samples + c.bad_messages + c.other_host, run.refused, "{c:?}");
    run
}
