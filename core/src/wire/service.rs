//! eCAL's service protocol, version 1, as eCAL 6.1.1 speaks it over TCP (`ecal/service/ecal_service`:
//! `protocol_layout.h`, `protocol_v1.cpp`, the client and server sessions), sans-IO.
//!
//! Every message is a 16-byte header and a payload:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | payload size, big-endian |
//! | 4 | protocol version (1) |
//! | 5 | message type: 1 handshake request, 2 handshake response, 3 service request, 4 service response |
//! | 6..8 | header size, big-endian (16) |
//! | 8..16 | reserved (0) |
//!
//! A header that says it is larger than 16 bytes is read whole and its extra bytes ignored; one that says less is
//! read as 16 bytes (as eCAL reads it). The client opens with a handshake request (payload: the lowest and highest
//! version it speaks, one byte each), the server answers with the version both speak (one byte); then the client
//! sends requests, one at a time, each answered by one response, on the same connection. Request and response
//! payloads are the protobuf messages `eCAL.pb.Request` and `eCAL.pb.Response` ([`super::pb`]).
//!
//! [`FrameDecoder`] cuts frames out of the bytes a connection delivers, holding at most the header and one payload
//! no larger than its bound: a frame announcing more is an error (the connection is closed), never an allocation.

/// Length of the header shoal writes (and the least it reads).
pub const HEADER_LEN: usize = 16;
/// The protocol version shoal speaks (eCAL 6.1.1 speaks only version 1; version 0 is deprecated).
pub const PROTOCOL_VERSION: u8 = 1;

/// Message types of protocol version 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    /// Client → server: the versions the client speaks.
    HandshakeRequest,
    /// Server → client: the version chosen.
    HandshakeResponse,
    /// Client → server: `eCAL.pb.Request`.
    Request,
    /// Server → client: `eCAL.pb.Response`.
    Response,
}

impl MessageType {
    /// The byte on the wire.
    pub fn to_u8(self) -> u8 {
        match self {
            MessageType::HandshakeRequest => 1,
            MessageType::HandshakeResponse => 2,
            MessageType::Request => 3,
            MessageType::Response => 4,
        }
    }

    /// From the byte on the wire.
    pub fn from_u8(b: u8) -> Option<MessageType> {
        match b {
            1 => Some(MessageType::HandshakeRequest),
            2 => Some(MessageType::HandshakeResponse),
            3 => Some(MessageType::Request),
            4 => Some(MessageType::Response),
            _ => None,
        }
    }
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Payload bytes that follow the header.
    pub payload_len: u32,
    /// Protocol version the sender wrote.
    pub version: u8,
    /// Message type byte (see [`MessageType::from_u8`]).
    pub message_type: u8,
    /// Header bytes on the wire (at least [`HEADER_LEN`]).
    pub header_len: usize,
}

/// Writes a header for a payload of `payload_len` bytes.
pub fn encode_header(message_type: MessageType, payload_len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&payload_len.to_be_bytes());
    h[4] = PROTOCOL_VERSION;
    h[5] = message_type.to_u8();
    h[6..8].copy_from_slice(&(HEADER_LEN as u16).to_be_bytes());
    h
}

/// Reads a header from its first 8 bytes (the rest is reserved).
pub fn decode_header(first8: &[u8; 8]) -> Header {
    let payload_len = u32::from_be_bytes([first8[0], first8[1], first8[2], first8[3]]);
    let header_len = usize::from(u16::from_be_bytes([first8[6], first8[7]])).max(HEADER_LEN);
    Header { payload_len, version: first8[4], message_type: first8[5], header_len }
}

/// The client's handshake request: header and payload (lowest and highest version: 1, 1).
pub fn handshake_request() -> Vec<u8> {
    let mut v = encode_header(MessageType::HandshakeRequest, 2).to_vec();
    v.extend_from_slice(&[PROTOCOL_VERSION, PROTOCOL_VERSION]);
    v
}

/// The server's handshake response choosing `version`.
pub fn handshake_response(version: u8) -> Vec<u8> {
    let mut v = encode_header(MessageType::HandshakeResponse, 1).to_vec();
    v.push(version);
    v
}

/// The version a server chooses for a client that speaks `min ..= max` (missing bytes read as 0, as eCAL reads
/// a short payload): the highest both speak, `None` when there is none.
pub fn choose_version(payload: &[u8]) -> Option<u8> {
    let min = payload.first().copied().unwrap_or(0);
    let max = payload.get(1).copied().unwrap_or(0);
    let hi = max.min(PROTOCOL_VERSION);
    let lo = min.max(PROTOCOL_VERSION);
    (hi >= lo).then_some(hi)
}

/// Length of the `eCAL.pb.Request` carrying `header` and `request` (as prost encodes it).
pub fn request_len(header: &super::pb::ServiceHeader, request: &[u8]) -> usize {
    use prost::encoding::{encoded_len_varint, key_len, message};
    let body =
        if request.is_empty() { 0 } else { key_len(2) + encoded_len_varint(request.len() as u64) + request.len() };
    message::encoded_len(1, header) + body
}

/// The frame of a call: the protocol header and `eCAL.pb.Request { header, request }`, byte for byte as prost
/// encodes that message, written from `request` without copying it into the message first.
pub fn request_frame(header: &super::pb::ServiceHeader, request: &[u8]) -> Vec<u8> {
    use prost::encoding::{WireType, encode_key, encode_varint, message};
    let len = request_len(header, request);
    let mut out = Vec::with_capacity(HEADER_LEN + len);
    out.extend_from_slice(&encode_header(MessageType::Request, u32::try_from(len).unwrap_or(u32::MAX)));
    message::encode(1, header, &mut out);
    // proto3 leaves an empty `bytes` field out.
    if !request.is_empty() {
        encode_key(2, WireType::LengthDelimited, &mut out);
        encode_varint(request.len() as u64, &mut out);
        out.extend_from_slice(request);
    }
    out
}

/// A protobuf message cut in two by [`split_bytes_field`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMessage {
    /// The message's other fields, as they were (for prost to decode).
    pub rest: Vec<u8>,
    /// The content of the `bytes` field (of its last occurrence, the one prost keeps; empty without one).
    pub field: Vec<u8>,
}

/// Why [`split_bytes_field`] refused a message (prost would refuse it too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A key, a length or a value runs past the end of the message.
    #[error("truncated protobuf message")]
    Truncated,
    /// A field of a wire type protobuf 3 does not write (groups) or that does not exist.
    #[error("protobuf wire type {0} not supported")]
    WireType(u8),
}

/// Cuts `bytes` field `field` out of protobuf message `msg` (an `eCAL.pb.Request` or `Response` payload): the
/// field's content stays in `msg`'s allocation, moved to its front, so that a large request or response is not
/// copied into a second one (and its fresh pages faulted in) as decoding the whole message with prost would.
pub fn split_bytes_field(mut msg: Vec<u8>, field: u32) -> Result<SplitMessage, SplitError> {
    fn varint(msg: &[u8], at: &mut usize) -> Result<u64, SplitError> {
        let mut buf = msg.get(*at..).ok_or(SplitError::Truncated)?;
        let before = buf.len();
        let v = prost::encoding::decode_varint(&mut buf).map_err(|_| SplitError::Truncated)?;
        *at += before - buf.len();
        Ok(v)
    }
    let mut rest = Vec::new();
    let mut found: Option<std::ops::Range<usize>> = None;
    let mut at = 0;
    while at < msg.len() {
        let start = at;
        let key = varint(&msg, &mut at)?;
        let wire = (key & 7) as u8;
        let skip = match wire {
            0 => {
                varint(&msg, &mut at)?;
                0
            }
            1 => 8,
            2 => usize::try_from(varint(&msg, &mut at)?).map_err(|_| SplitError::Truncated)?,
            5 => 4,
            w => return Err(SplitError::WireType(w)),
        };
        let end = at.checked_add(skip).filter(|e| *e <= msg.len()).ok_or(SplitError::Truncated)?;
        if wire == 2 && key >> 3 == u64::from(field) {
            found = Some(at..end);
        } else {
            rest.extend_from_slice(&msg[start..end]);
        }
        at = end;
    }
    let field = match found {
        Some(r) => {
            msg.truncate(r.end);
            msg.drain(..r.start);
            msg
        }
        None => Vec::new(),
    };
    Ok(SplitMessage { rest, field })
}

/// A complete frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Its header.
    pub header: Header,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Why a connection's bytes are not a valid frame stream (the connection is closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A frame announced a payload larger than the bound.
    #[error("a service frame of {len} bytes (at most {max})")]
    TooLarge {
        /// Announced payload length.
        len: u32,
        /// The bound.
        max: usize,
    },
}

/// Cuts frames from a byte stream (see the module docs).
#[derive(Debug)]
pub struct FrameDecoder {
    max_payload: usize,
    /// Header bytes so far (up to 8, then the header's rest is skipped).
    head: [u8; 8],
    head_len: usize,
    header: Option<Header>,
    /// Reserved header bytes still to skip.
    skip: usize,
    payload: Vec<u8>,
}

impl FrameDecoder {
    /// A decoder refusing payloads over `max_payload` bytes.
    pub fn new(max_payload: usize) -> FrameDecoder {
        FrameDecoder { max_payload, head: [0; 8], head_len: 0, header: None, skip: 0, payload: Vec::new() }
    }

    /// Bytes held for the frame in progress.
    pub fn held(&self) -> usize {
        self.payload.len() + self.head_len
    }

    /// Whether a frame has begun and not ended.
    pub fn mid_frame(&self) -> bool {
        self.head_len > 0
    }

    /// Takes bytes from the front of `input` (advancing it) until a frame is complete, which it returns; `Ok(None)`
    /// when `input` ran out first.
    pub fn decode(&mut self, input: &mut &[u8]) -> Result<Option<Frame>, FrameError> {
        loop {
            if self.head_len < 8 {
                let n = (8 - self.head_len).min(input.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&input[..n]);
                self.head_len += n;
                *input = &input[n..];
                if self.head_len < 8 {
                    return Ok(None);
                }
                let h = decode_header(&self.head);
                if h.payload_len as usize > self.max_payload {
                    return Err(FrameError::TooLarge { len: h.payload_len, max: self.max_payload });
                }
                self.skip = h.header_len - 8;
                self.header = Some(h);
                self.payload = Vec::with_capacity(h.payload_len as usize);
            }
            if self.skip > 0 {
                let n = self.skip.min(input.len());
                self.skip -= n;
                *input = &input[n..];
                if self.skip > 0 {
                    return Ok(None);
                }
            }
            let Some(h) = self.header else {
                self.head_len = 0;
                continue;
            };
            let want = h.payload_len as usize - self.payload.len();
            let n = want.min(input.len());
            self.payload.extend_from_slice(&input[..n]);
            *input = &input[n..];
            if self.payload.len() < h.payload_len as usize {
                return Ok(None);
            }
            self.head_len = 0;
            self.header = None;
            return Ok(Some(Frame { header: h, payload: std::mem::take(&mut self.payload) }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::pb;
    use prost::Message;

    fn header(method: &str) -> pb::ServiceHeader {
        pb::ServiceHeader { method_name: method.into(), service_name: "svc".into(), ..Default::default() }
    }

    #[test]
    fn request_frames_are_what_prost_encodes() {
        for request in [vec![], vec![7u8], vec![1u8; 200], vec![9u8; 1 << 20]] {
            let h = header("m");
            let msg = pb::Request { header: Some(h.clone()), request: request.clone() };
            let mut want = encode_header(MessageType::Request, msg.encoded_len() as u32).to_vec();
            msg.encode(&mut want).unwrap();
            assert_eq!(request_frame(&h, &request), want, "{} B", request.len());
            assert_eq!(request_len(&h, &request), msg.encoded_len());
        }
    }

    #[test]
    fn a_split_message_decodes_as_the_whole_does() {
        // Responses as prost writes them, with the payload field repeated (the last counts), unknown fields of
        // every wire type around it, and empty.
        let resp = |payload: &[u8], ret: i64| {
            pb::Response { header: Some(header("m")), response: payload.to_vec(), ret_state: ret }.encode_to_vec()
        };
        let mut odd = resp(b"first", 3);
        odd.extend_from_slice(&[0x20, 0x05, 0x29, 1, 2, 3, 4, 5, 6, 7, 8, 0x35, 1, 2, 3, 4, 0x3a, 2, 0xaa, 0xbb]);
        odd.extend_from_slice(&resp(b"second", 0)[resp(b"", 0).len()..]);
        for msg in [resp(b"", 0), resp(b"x", -1), resp(&[5u8; 100_000], 7), odd] {
            let whole = pb::Response::decode(msg.as_slice()).unwrap();
            let split = split_bytes_field(msg, 2).unwrap();
            let mut got = pb::Response::decode(split.rest.as_slice()).unwrap();
            assert!(got.response.is_empty());
            got.response = split.field;
            assert_eq!(got, whole);
        }
    }

    #[test]
    fn a_broken_message_is_refused_without_a_panic() {
        let whole = pb::Response { header: Some(header("m")), response: vec![1; 50], ret_state: 1 }.encode_to_vec();
        for cut in 1..whole.len() {
            let part = whole[..cut].to_vec();
            let prost_ok = pb::Response::decode(part.as_slice()).is_ok();
            assert_eq!(split_bytes_field(part, 2).is_ok(), prost_ok, "cut at {cut}");
        }
        assert_eq!(split_bytes_field(vec![0x13], 2), Err(SplitError::WireType(3)), "a group");
        assert_eq!(split_bytes_field(vec![0x12, 0xff, 0xff, 0xff, 0xff, 0x0f], 2), Err(SplitError::Truncated));
        assert_eq!(split_bytes_field(vec![0x80], 2), Err(SplitError::Truncated));
    }

    fn frames(bytes: &[u8], chunk: usize, max: usize) -> Result<Vec<Frame>, FrameError> {
        let mut d = FrameDecoder::new(max);
        let mut out = Vec::new();
        for mut c in bytes.chunks(chunk) {
            while !c.is_empty() {
                if let Some(f) = d.decode(&mut c)? {
                    out.push(f);
                }
            }
        }
        Ok(out)
    }

    #[test]
    fn the_handshake_is_laid_out_as_ecal_writes_it() {
        assert_eq!(handshake_request(), [0, 0, 0, 2, 1, 1, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(handshake_response(1), [0, 0, 0, 1, 1, 2, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(choose_version(&[1, 1]), Some(1));
        assert_eq!(choose_version(&[0, 5]), Some(1));
        assert_eq!(choose_version(&[0, 0]), None, "a v0-only client has no common version");
        assert_eq!(choose_version(&[]), None);
    }

    #[test]
    fn frames_split_anywhere_decode_the_same() {
        let mut stream = handshake_request();
        stream.extend_from_slice(&encode_header(MessageType::Request, 5));
        stream.extend_from_slice(b"hello");
        stream.extend_from_slice(&encode_header(MessageType::Response, 0));
        for chunk in 1..stream.len() {
            let f = frames(&stream, chunk, 100).unwrap();
            assert_eq!(f.len(), 3);
            assert_eq!(f[0].payload, [1, 1]);
            assert_eq!(MessageType::from_u8(f[1].header.message_type), Some(MessageType::Request));
            assert_eq!(f[1].payload, b"hello");
            assert!(f[2].payload.is_empty());
        }
    }

    #[test]
    fn a_longer_header_is_skipped_and_a_shorter_one_read_as_sixteen_bytes() {
        let mut stream = vec![0, 0, 0, 2, 1, 3, 0, 20];
        stream.extend_from_slice(&[9; 12]);
        stream.extend_from_slice(b"ok");
        let mut short = vec![0, 0, 0, 1, 1, 4, 0, 4];
        short.extend_from_slice(&[0; 8]);
        short.push(b'x');
        stream.extend_from_slice(&short);
        let f = frames(&stream, 3, 100).unwrap();
        assert_eq!((f[0].payload.as_slice(), f[1].payload.as_slice()), (&b"ok"[..], &b"x"[..]));
    }

    #[test]
    fn a_frame_over_the_bound_is_an_error_before_anything_is_allocated() {
        let h = encode_header(MessageType::Request, u32::MAX);
        let mut d = FrameDecoder::new(1 << 20);
        let mut input = &h[..];
        assert_eq!(d.decode(&mut input), Err(FrameError::TooLarge { len: u32::MAX, max: 1 << 20 }));
        assert!(d.payload.capacity() == 0);
    }
}
