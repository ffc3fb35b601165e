//! The subscriber side of eCAL's TCP layer (`transport::ecal_tcp::stream::StreamDecoder`): what a malicious or broken
//! publisher sends on a connection, fed in arbitrary chunks, as the I/O thread feeds it (through its scratch buffer,
//! or, for the rest of a large payload, straight into the payload's buffer: `payload_spare`).
//!
//! Input format (integers little-endian; a truncated input reads as zeros or fewer items):
//! `[max_message u16]` (the decoder takes frames of 64 + that many data bytes), `[direct_min u16]` (0: never read in
//! place, else read in place while at least that many payload bytes are left), `[n u8]` then `n % 32` chunk sizes
//! `[u16]` (cycled; 0 reads as 1), `[f u8]` then `f % 16` messages `[clock step u8][payload length u16][fill u8]`
//! framed with `encode_message` after a handshake frame (clocks from the first step on, a step of 0 repeats a clock),
//! then the rest of the input as raw bytes after those frames.
//!
//! Oracles besides "never panics":
//! - the same bytes fed whole and fed in the chunks (with reads in place) give the same events and the same end
//!   (the same error, if any, after the same events);
//! - what the decoder holds never exceeds `max(max_message, 256 KiB)` (a sample header is buffered up to 64 KiB + 6,
//!   in a vector that may double), a delivered payload never exceeds `max_message`;
//! - delivered clocks rise strictly, and a `Lost` count is never 0;
//! - the framed messages give exactly the events a model of the decoder expects: the handshake, then each message
//!   delivered, skipped as too large, or refused as out of order, with the gaps its clock leaves reported as lost
//!   (less the frames skipped in between). The raw tail only adds events after those.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use shoal::transport::ecal_tcp::frame::{HEADER_LEN, encode_message, handshake};
use shoal::transport::ecal_tcp::stream::{Event, StreamDecoder, StreamError};

const PUBLISHER: u64 = 77;

struct Input {
    max_message: usize,
    direct_min: usize,
    chunks: Vec<usize>,
    /// (clock, payload) of the framed messages.
    messages: Vec<(u64, Vec<u8>)>,
    tail: Vec<u8>,
}

fn parse(data: &[u8]) -> arbitrary::Result<Input> {
    let mut u = Unstructured::new(data);
    let max_message = 64 + usize::from(u16::arbitrary(&mut u)?);
    let direct_min = usize::from(u16::arbitrary(&mut u)?);
    let n = u8::arbitrary(&mut u)? % 32;
    let mut chunks = Vec::new();
    for _ in 0..n {
        chunks.push(usize::from(u16::arbitrary(&mut u)?).max(1));
    }
    if chunks.is_empty() {
        chunks.push(usize::MAX);
    }
    let f = u8::arbitrary(&mut u)? % 16;
    let mut messages = Vec::new();
    let mut clock = 0u64;
    for _ in 0..f {
        clock += u64::from(u8::arbitrary(&mut u)?);
        let len = usize::from(u16::arbitrary(&mut u)?);
        let fill = u8::arbitrary(&mut u)?;
        messages.push((clock, vec![fill; len]));
    }
    let tail = u.take_rest().to_vec();
    Ok(Input { max_message, direct_min, chunks, messages, tail })
}

/// An event as compared between runs (a payload by its length and FNV-1a digest).
fn show(e: &Event) -> String {
    match e {
        Event::Message(m) => {
            let digest = m
                .payload
                .iter()
                .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
            format!("Message({}, {}, {}, {} bytes, {digest:016x})", m.publisher_id, m.clock, m.time_us, m.payload.len())
        }
        other => format!("{other:?}"),
    }
}

/// Feeds `stream` to a fresh decoder, whole or in `chunks` (reading in place while `direct_min` bytes are left);
/// checks the bounds after every step. The events and the end.
fn run(input: &Input, stream: &[u8], chunked: bool) -> (Vec<String>, Result<(), StreamError>) {
    let mut d = StreamDecoder::new(input.max_message);
    let mut events = Vec::new();
    let bound = input.max_message.max(256 * 1024);
    let mut last_clock: Option<u64> = None;
    let mut check = |e: Event| {
        match &e {
            Event::Message(m) => {
                assert!(m.payload.len() <= input.max_message);
                assert!(last_clock.is_none_or(|l| m.clock > l), "clocks rise: {last_clock:?} then {}", m.clock);
                last_clock = Some(m.clock);
            }
            Event::Lost(n) => assert!(*n > 0),
            _ => {}
        }
        events.push(show(&e));
    };
    if !chunked {
        let r = d.feed(stream, &mut check);
        assert!(d.held_bytes() <= bound);
        return (events, r);
    }
    let mut at = 0;
    let mut i = 0;
    while at < stream.len() {
        let size = input.chunks[i % input.chunks.len()].min(stream.len() - at);
        i += 1;
        let mut chunk = &stream[at..at + size];
        at += size;
        while !chunk.is_empty() {
            // A large rest of a payload is received in place, as the I/O thread does.
            if input.direct_min > 0
                && let Some((buf, left)) = d.payload_spare(input.direct_min)
            {
                let spare = buf.capacity() - buf.len();
                assert!(spare > 0, "room for the next part");
                let n = spare.min(left).min(chunk.len());
                buf.extend_from_slice(&chunk[..n]);
                chunk = &chunk[n..];
                if let Err(e) = d.feed(&[], &mut check) {
                    return (events, Err(e));
                }
            } else {
                let r = d.feed(chunk, &mut check);
                chunk = &[];
                if let Err(e) = r {
                    return (events, Err(e));
                }
            }
            assert!(d.held_bytes() <= bound, "held {} > {bound}", d.held_bytes());
        }
    }
    (events, Ok(()))
}

/// The events the framed messages must give (see the module docs).
fn expected(input: &Input, frame_sizes: &[usize]) -> Vec<String> {
    let mut out = vec![show(&Event::Handshake)];
    let mut last: Option<u64> = None;
    let mut skipped = 0u64;
    for ((clock, payload), size) in input.messages.iter().zip(frame_sizes) {
        let data_size = size - HEADER_LEN;
        if data_size > input.max_message {
            skipped += 1;
            out.push(show(&Event::TooLarge { data_size: data_size as u64 }));
            continue;
        }
        if let Some(l) = last {
            if *clock <= l {
                out.push(show(&Event::OutOfOrder { clock: *clock, last: l }));
                continue;
            }
            let gap = clock - l - 1;
            let lost = gap - gap.min(skipped);
            if lost > 0 {
                out.push(show(&Event::Lost(lost)));
            }
        }
        skipped = 0;
        last = Some(*clock);
        out.push(show(&Event::Message(shoal::transport::ecal_tcp::stream::Message {
            publisher_id: PUBLISHER,
            clock: *clock,
            time_us: *clock as i64,
            payload: payload.clone(),
        })));
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = parse(data) else { return };
    let mut stream = handshake().to_vec();
    let mut sizes = Vec::new();
    for (clock, payload) in &input.messages {
        let f = encode_message("fuzz.topic", &PUBLISHER.to_string(), PUBLISHER, *clock, *clock as i64, payload)
            .expect("encodes");
        sizes.push(f.len());
        stream.extend_from_slice(&f);
    }
    stream.extend_from_slice(&input.tail);
    let (whole, whole_end) = run(&input, &stream, false);
    let (chunked, chunked_end) = run(&input, &stream, true);
    assert_eq!(whole, chunked, "the same events whatever the chunks");
    assert_eq!(whole_end, chunked_end);
    let want = expected(&input, &sizes);
    assert!(whole.len() >= want.len(), "framed messages all reported: {whole:?} vs {want:?}");
    assert_eq!(&whole[..want.len()], &want[..]);
});
