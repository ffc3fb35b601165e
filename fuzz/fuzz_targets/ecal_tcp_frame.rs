//! eCAL's TCP layer frames (`transport::ecal_tcp::frame`) on arbitrary bytes: the tcp_pubsub header
//! (`parse_header`), the data of a payload frame (`decode_message`, and `head_want` + `decode_head` as the subscriber
//! uses them on a frame still arriving), and what a publisher reads from a subscriber (`take_subscriber_frames`).
//!
//! Input: a frame as it arrives, a header (the first 12 bytes) and its data (the rest, whatever the header says);
//! the whole input is also what a publisher reads from a subscriber.
//!
//! Oracles besides "never panics":
//! - a parsed header has `header_size` ≥ 12, and `put_header` of its type and size parses back to the same type and
//!   size (with `header_size` 12);
//! - `head_want` never asks for more than the frame holds, and decoding only those first bytes gives what decoding
//!   the whole frame gives (the subscriber decodes the sample header before the payload has arrived);
//! - a decoded message's payload lies in the frame; encoded again with `encode_message` (eCAL 6.1.1's layout) it
//!   decodes to the same publisher id, clock, time and payload;
//! - `take_subscriber_frames` takes only whole frames, no more than it was given, never more than `max` a frame; fed
//!   the same bytes in two parts it finds the same handshakes and leaves the same rest.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal::transport::ecal_tcp::frame::{
    FrameHeader, HEADER_LEN, decode_head, decode_message, encode_message, head_want, parse_header, put_header,
    take_subscriber_frames,
};

/// What a publisher reads from one subscriber at most (as the layer's `MAX_SESSION_INPUT`).
const MAX_INPUT: usize = 4096;

fuzz_target!(|data: &[u8]| {
    if let Some(h) = data.first_chunk::<HEADER_LEN>().and_then(parse_header) {
        assert!(usize::from(h.header_size) >= HEADER_LEN);
        let mut again = [0u8; HEADER_LEN];
        put_header(&mut again, h.kind, h.data_size);
        assert_eq!(parse_header(&again), Some(FrameHeader { header_size: HEADER_LEN as u16, ..h }));
    }

    // A frame as it arrives: the header, then its data (whatever the header says its size is).
    let frame_data = data.get(HEADER_LEN..).unwrap_or_default();
    let want = head_want(frame_data, frame_data.len());
    assert!(want <= frame_data.len());
    let whole = decode_message(frame_data);
    let from_head = decode_head(&frame_data[..want], frame_data.len());
    assert_eq!(whole.as_ref().ok(), from_head.as_ref().ok());
    assert_eq!(whole.is_err(), from_head.is_err());
    if let Ok(m) = whole {
        assert!(m.payload.start <= m.payload.end && m.payload.end <= frame_data.len());
        assert_eq!(m.payload.start, want, "the payload starts where the head ends");
        let payload = &frame_data[m.payload.clone()];
        let frame =
            encode_message("fuzz.topic", &m.publisher_id.to_string(), m.publisher_id, m.clock, m.time_us, payload)
                .expect("a payload that fit a frame fits again");
        let back = decode_message(&frame[HEADER_LEN..]).expect("our own frame decodes");
        assert_eq!((back.publisher_id, back.clock, back.time_us), (m.publisher_id, m.clock, m.time_us));
        assert_eq!(&frame[HEADER_LEN..][back.payload], payload);
    }

    let mut input = data.to_vec();
    let once = take_subscriber_frames(&mut input, MAX_INPUT);
    if once.is_ok() {
        assert!(input.len() <= data.len());
        assert_eq!(&data[data.len() - input.len()..], &input[..], "only a prefix is taken");
        // What is left is less than one whole frame.
        if let Some(h) = input.first_chunk::<HEADER_LEN>().and_then(parse_header) {
            assert!((input.len() as u128) < u128::from(h.header_size) + u128::from(h.data_size));
        }
    }
    let split = data.len() / 2;
    let mut parts = data[..split].to_vec();
    let first = take_subscriber_frames(&mut parts, MAX_INPUT);
    if let Ok(n) = first {
        parts.extend_from_slice(&data[split..]);
        let second = take_subscriber_frames(&mut parts, MAX_INPUT);
        match (&once, second) {
            (Ok(all), Ok(m)) => {
                assert_eq!(*all, n + m);
                assert_eq!(parts, input);
            }
            (Err(a), Err(b)) => assert_eq!(*a, b),
            (a, b) => panic!("whole {a:?}, in two parts {n:?} then {b:?}"),
        }
    } else {
        assert!(once.is_err(), "an error in the first half is one in the whole: {first:?} vs {once:?}");
    }
});
