//! The body of the `service_frame` fuzz target: the frames of eCAL's service protocol (`wire::service`) as a server
//! reads a client's bytes and a client a server's, cut by `FrameDecoder` from a stream arriving in chunks, and the
//! `eCAL.pb.Request` / `Response` payloads they carry. Shared (`#[path]`) by `fuzz_targets/service_frame.rs` and
//! `core/tests/fuzz_service_frame.rs`, which runs the committed seeds through it in the test suite.
//!
//! Input format: `[max u8]` (the payload bound is `16 << (max % 21)` bytes), `[chunk u8]` (the stream arrives in
//! pieces of `chunk + 1` bytes), then the stream.
//!
//! Oracle: nothing panics; the chunked decoder finds exactly the frames, and stops at exactly the error, that a
//! plain reading of the whole stream by the header rules finds (16-byte header at least, a longer one skipped, the
//! payload bound); it never holds more than the bound plus 8 header bytes; a request or response payload that
//! decodes re-encodes to bytes that decode to the same message; a handshake's chosen version is one shoal speaks.

use prost::Message as _;
use shoal::wire::pb;
use shoal::wire::service::{FrameDecoder, FrameError, MessageType, PROTOCOL_VERSION, choose_version};

/// What one input did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// Complete frames found.
    pub(crate) frames: usize,
    /// The stream ended in a frame over the bound.
    pub(crate) too_large: bool,
    /// Request or response payloads that decoded.
    pub(crate) messages: usize,
}

/// The frames of `stream` read whole, and whether it ends in one over `max` (the model).
fn model(stream: &[u8], max: usize) -> (Vec<(u8, Vec<u8>)>, bool) {
    let mut out = Vec::new();
    let mut at = 0;
    while stream.len() - at >= 8 {
        let h = &stream[at..at + 8];
        let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
        if len > max {
            return (out, true);
        }
        let header_len = usize::from(u16::from_be_bytes([h[6], h[7]])).max(16);
        let end = at + header_len + len;
        if end > stream.len() {
            break;
        }
        out.push((h[5], stream[at + header_len..end].to_vec()));
        at = end;
    }
    (out, false)
}

pub(crate) fn run(data: &[u8]) -> Run {
    let [max_sel, chunk, stream @ ..] = data else { return Run::default() };
    let max = 16usize << (max_sel % 21);
    let chunk = usize::from(*chunk) + 1;
    let (expected, expect_error) = model(stream, max);

    let mut d = FrameDecoder::new(max);
    let mut frames = Vec::new();
    let mut error = None;
    'feed: for mut piece in stream.chunks(chunk) {
        while !piece.is_empty() {
            match d.decode(&mut piece) {
                Ok(Some(f)) => {
                    assert_eq!(f.payload.len(), f.header.payload_len as usize);
                    frames.push((f.header.message_type, f.payload));
                }
                Ok(None) => assert!(piece.is_empty(), "the decoder stopped with input left"),
                Err(e) => {
                    error = Some(e);
                    break 'feed;
                }
            }
            assert!(d.held() <= max + 8, "held {} with a bound of {max}", d.held());
        }
    }
    assert_eq!(frames, expected, "chunked decoding differs from the whole stream's");
    assert_eq!(error.is_some(), expect_error);
    if let Some(FrameError::TooLarge { len, max: m }) = error {
        assert!(len as usize > m && m == max);
    }

    let mut messages = 0;
    for (kind, payload) in &frames {
        match MessageType::from_u8(*kind) {
            Some(MessageType::Request) => {
                if let Ok(m) = pb::Request::decode(payload.as_slice()) {
                    messages += 1;
                    assert_eq!(pb::Request::decode(m.encode_to_vec().as_slice()).as_ref(), Ok(&m));
                }
            }
            Some(MessageType::Response) => {
                if let Ok(m) = pb::Response::decode(payload.as_slice()) {
                    messages += 1;
                    assert_eq!(pb::Response::decode(m.encode_to_vec().as_slice()).as_ref(), Ok(&m));
                }
            }
            Some(MessageType::HandshakeRequest) => {
                if let Some(v) = choose_version(payload) {
                    assert_eq!(v, PROTOCOL_VERSION);
                }
            }
            _ => {}
        }
    }
    Run { frames: frames.len(), too_large: error.is_some(), messages }
}
