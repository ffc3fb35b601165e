//! Byte formats of eCAL's TCP layer.
//!
//! tcp_pubsub frames every message with a 12-byte little-endian header: `u16 header_size (12)`, `u8 type`
//! (0 payload, 1 protocol handshake), `u8 reserved`, `u64 data_size`, then `data_size` bytes. A receiver honours
//! a larger `header_size` (skips the extra bytes). The handshake's data is one byte, the protocol version (0).
//!
//! eCAL 6.1.1 puts into a payload frame: `"ECAL"`, `u16 LE` length of a protobuf `eCAL.pb.Sample` that carries
//! no payload field (`1 cmd_type = 0`, `5 topic {7 name, 6 id, 3 process_id = 0, 2 host_name = ""}`,
//! `6 content {1 id = 0, 2 clock, 3 time, 6 size = payload length, 7 hash}`, `8 padding`, zeros chosen so that
//! the payload starts 8-byte aligned after `"ECAL"`), then the payload bytes.

use prost::Message as _;

use crate::wire::data_sample::{content_hash, put_varint, varint_len};
use crate::wire::pb::{self, TopicIdError, parse_topic_id};

/// Length of the tcp_pubsub header.
pub const HEADER_LEN: usize = 12;
/// Frame type of a message.
pub const TYPE_PAYLOAD: u8 = 0;
/// Frame type of the protocol handshake.
pub const TYPE_HANDSHAKE: u8 = 1;
/// The eCAL magic in front of every message.
const MAGIC: &[u8; 4] = b"ECAL";

/// A tcp_pubsub header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Bytes of the header as the sender wrote it (≥ 12 for a valid one).
    pub header_size: u16,
    /// 0 payload, 1 handshake.
    pub kind: u8,
    /// Bytes that follow the header.
    pub data_size: u64,
}

/// Writes a tcp_pubsub header into the first 12 bytes of `out`.
pub fn put_header(out: &mut [u8], kind: u8, data_size: u64) {
    out[0..2].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    out[2] = kind;
    out[3] = 0;
    out[4..12].copy_from_slice(&data_size.to_le_bytes());
}

/// Parses the first 12 bytes of a header (the fields tcp_pubsub 1.x knows); `None` when `header_size` < 12.
pub fn parse_header(b: &[u8; HEADER_LEN]) -> Option<FrameHeader> {
    let header_size = u16::from_le_bytes([b[0], b[1]]);
    if usize::from(header_size) < HEADER_LEN {
        return None;
    }
    let mut size = [0u8; 8];
    size.copy_from_slice(&b[4..12]);
    Some(FrameHeader { header_size, kind: b[2], data_size: u64::from_le_bytes(size) })
}

/// The handshake frame both sides send: protocol version 0.
pub fn handshake() -> [u8; HEADER_LEN + 1] {
    let mut f = [0u8; HEADER_LEN + 1];
    put_header(&mut f, TYPE_HANDSHAKE, 1);
    f
}

/// What follows the version byte in the handshake of a shoal subscriber that asks for a publisher's history.
const HISTORY_ASK: &[u8; 4] = b"SHHI";
/// The same for a connection that asks for the history only: a subscriber whose live data comes through another
/// layer (UDP) fetches the history this way; the publisher sends no live message on it.
const HISTORY_ONLY_ASK: &[u8; 4] = b"SHHO";
/// Frame type of the mark a shoal publisher sends after the history it was asked for (no data): what follows is
/// live data. tcp_pubsub knows types 0 and 1 only; the mark goes only to shoal subscribers that asked.
pub const TYPE_HISTORY_END: u8 = 0x48;

/// The mark after a history ([`TYPE_HISTORY_END`]).
pub fn history_end() -> [u8; HEADER_LEN] {
    let mut f = [0u8; HEADER_LEN];
    put_header(&mut f, TYPE_HISTORY_END, 0);
    f
}

/// The handshake of a shoal subscriber asking for the newest `depth` messages the publisher kept for late joiners
/// (`u32::MAX`: all): protocol version 0, then `"SHHI"` and the depth (`u32` LE). tcp_pubsub's publisher (eCAL
/// 6.1.1's, tcp_pubsub 2.0.1 `PublisherSession`) reads a handshake's data whole and copies only its first byte, the
/// version, so an eCAL publisher answers it as any handshake.
pub fn handshake_asking_history(depth: u32) -> [u8; HEADER_LEN + 9] {
    history_handshake(HISTORY_ASK, depth)
}

/// The handshake of a shoal subscriber asking for the history only (`"SHHO"`, otherwise as
/// [`handshake_asking_history`]): the publisher sends the kept messages and the [`history_end`] mark, then nothing.
pub fn handshake_asking_history_only(depth: u32) -> [u8; HEADER_LEN + 9] {
    history_handshake(HISTORY_ONLY_ASK, depth)
}

fn history_handshake(ask: &[u8; 4], depth: u32) -> [u8; HEADER_LEN + 9] {
    let mut f = [0u8; HEADER_LEN + 9];
    put_header(&mut f, TYPE_HANDSHAKE, 9);
    f[HEADER_LEN + 1..HEADER_LEN + 5].copy_from_slice(ask);
    f[HEADER_LEN + 5..].copy_from_slice(&depth.to_le_bytes());
    f
}

/// The history a handshake's data asks for: (depth, history only), if it asks.
fn asked_history(data: &[u8]) -> Option<(u32, bool)> {
    let rest = data.get(1..9)?;
    let depth = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
    match &rest[..4] {
        a if a == HISTORY_ASK => Some((depth, false)),
        a if a == HISTORY_ONLY_ASK => Some((depth, true)),
        _ => None,
    }
}

fn str_field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

fn put_str_field(buf: &mut Vec<u8>, tag: u8, s: &[u8]) {
    buf.push(tag);
    put_varint(buf, s.len() as u64);
    buf.extend_from_slice(s);
}

/// Why a message cannot be framed.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// eCAL's `content.size` is an int32.
    #[error("a message of {0} bytes is larger than eCAL's TCP layer carries (2^31 - 1)")]
    TooLarge(usize),
    /// The sample header must fit the u16 length field.
    #[error("the topic name makes the sample header longer than 65535 bytes")]
    HeaderTooLong,
}

/// One complete payload frame (tcp_pubsub header, eCAL header, payload), as eCAL 6.1.1 writes it.
pub fn encode_message(
    topic: &str,
    topic_id: &str,
    publisher_id: u64,
    clock: u64,
    time_us: i64,
    payload: &[u8],
) -> Result<Vec<u8>, EncodeError> {
    let mut buf = encode_head(topic, topic_id, publisher_id, clock, time_us, payload.len())?;
    buf.extend_from_slice(payload);
    Ok(buf)
}

/// The bytes of a payload frame before its payload (tcp_pubsub header, `"ECAL"`, length, sample header) for a
/// payload of `payload_len` bytes; the frame on the wire is these bytes followed by the payload.
pub fn encode_head(
    topic: &str,
    topic_id: &str,
    publisher_id: u64,
    clock: u64,
    time_us: i64,
    payload_len: usize,
) -> Result<Vec<u8>, EncodeError> {
    let size = i32::try_from(payload_len).map_err(|_| EncodeError::TooLarge(payload_len))?;
    let hash = content_hash(publisher_id, clock);
    // topic {7 name, 6 id, 3 pid 0, 2 host ""}
    let topic_len = str_field_len(topic.len()) + str_field_len(topic_id.len()) + 2 + 2;
    // content {1 id 0, 2 clock, 3 time, 6 size, 7 hash}
    let content_len =
        2 + 1 + varint_len(clock) + 1 + varint_len(time_us as u64) + 1 + varint_len(size as u64) + 1 + varint_len(hash);
    let unpadded =
        2 + 1 + varint_len(topic_len as u64) + topic_len + 1 + varint_len(content_len as u64) + content_len + 2;
    let padding = (8 - (MAGIC.len() + 2 + unpadded) % 8) % 8;
    let proto_len = u16::try_from(unpadded + padding).map_err(|_| EncodeError::HeaderTooLong)?;
    let head_len = HEADER_LEN + MAGIC.len() + 2 + usize::from(proto_len);
    let data_size = head_len - HEADER_LEN + payload_len;
    let mut buf = Vec::with_capacity(head_len);
    buf.resize(HEADER_LEN, 0);
    put_header(&mut buf, TYPE_PAYLOAD, data_size as u64);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&proto_len.to_le_bytes());
    buf.extend_from_slice(&[0x08, 0]);
    buf.push(0x2a);
    put_varint(&mut buf, topic_len as u64);
    put_str_field(&mut buf, 0x3a, topic.as_bytes());
    put_str_field(&mut buf, 0x32, topic_id.as_bytes());
    buf.extend_from_slice(&[0x18, 0, 0x12, 0]);
    buf.push(0x32);
    put_varint(&mut buf, content_len as u64);
    buf.extend_from_slice(&[0x08, 0]);
    buf.push(0x10);
    put_varint(&mut buf, clock);
    buf.push(0x18);
    put_varint(&mut buf, time_us as u64);
    buf.push(0x30);
    put_varint(&mut buf, size as u64);
    buf.push(0x38);
    put_varint(&mut buf, hash);
    buf.push(0x42);
    buf.push(padding as u8);
    buf.resize(buf.len() + padding, 0);
    debug_assert_eq!(buf.len(), head_len);
    Ok(buf)
}

/// Why the data of a payload frame was rejected.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than the magic and the length field, or the magic is not `ECAL`.
    #[error("no ECAL magic")]
    NoMagic,
    /// The protobuf length runs past the frame.
    #[error("sample header of {0} bytes runs past the frame")]
    HeaderPastEnd(usize),
    /// The sample header is not a valid `eCAL.pb.Sample`.
    #[error("invalid sample header: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// No `topic` or `content`.
    #[error("sample header without topic or content")]
    Incomplete,
    /// `topic_id` not a decimal u64.
    #[error(transparent)]
    BadTopicId(#[from] TopicIdError),
    /// `content.size` negative or past the frame.
    #[error("content size {size} does not fit the {left} payload bytes of the frame")]
    BadSize {
        /// The announced size.
        size: i32,
        /// Bytes left after the header.
        left: usize,
    },
    /// A negative clock.
    #[error("negative clock {0}")]
    NegativeClock(i64),
}

/// What a payload frame carries, the payload as a range of the frame's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// `topic.topic_id`: the publisher's entity id.
    pub publisher_id: u64,
    /// `content.clock`.
    pub clock: u64,
    /// `content.time`, µs since the UNIX epoch.
    pub time_us: i64,
    /// Where the payload lies in the data.
    pub payload: std::ops::Range<usize>,
}

/// Decodes the data of a payload frame (what follows the tcp_pubsub header).
pub fn decode_message(data: &[u8]) -> Result<Decoded, DecodeError> {
    decode_head(data, data.len())
}

/// Bytes of a frame's data that [`decode_head`] needs, given those of them received so far (`data`):
/// the magic and length field, then the sample header, never more than the `data_len` bytes of the frame.
pub fn head_want(data: &[u8], data_len: usize) -> usize {
    let fixed = MAGIC.len() + 2;
    if data.len() < fixed {
        return fixed.min(data_len);
    }
    (fixed + usize::from(u16::from_le_bytes([data[4], data[5]]))).min(data_len)
}

/// Decodes a payload frame from the start of its data (`head`, at least [`head_want`] bytes of it) and the
/// length of the whole data, `data_len`; the payload range is relative to the data.
pub fn decode_head(head: &[u8], data_len: usize) -> Result<Decoded, DecodeError> {
    if head.len() < MAGIC.len() + 2 || &head[..4] != MAGIC {
        return Err(DecodeError::NoMagic);
    }
    let proto_len = usize::from(u16::from_le_bytes([head[4], head[5]]));
    let start = MAGIC.len() + 2;
    let proto = head
        .get(start..start + proto_len)
        .filter(|_| start + proto_len <= data_len)
        .ok_or(DecodeError::HeaderPastEnd(proto_len))?;
    let s = pb::Sample::decode(proto)?;
    let (Some(topic), Some(content)) = (s.topic, s.content) else { return Err(DecodeError::Incomplete) };
    let publisher_id = parse_topic_id(&topic.topic_id)?;
    let clock = u64::try_from(content.clock).map_err(|_| DecodeError::NegativeClock(content.clock))?;
    let body = start + proto_len;
    let left = data_len - body;
    let len = usize::try_from(content.size).ok().filter(|n| *n <= left);
    let Some(len) = len else { return Err(DecodeError::BadSize { size: content.size, left }) };
    Ok(Decoded { publisher_id, clock, time_us: content.time, payload: body..body + len })
}

/// Why a publisher closes a subscriber's connection after reading what it sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubscriberInputError {
    /// A header whose `header_size` is below 12.
    #[error("invalid frame header from the subscriber")]
    BadHeader,
    /// A frame larger than the publisher reads from a subscriber.
    #[error("oversized frame from the subscriber")]
    Oversized,
}

/// What a publisher reads from a subscriber: tcp_pubsub sends its handshake, nothing else. Takes the complete
/// frames at the start of `input` (what the connection received so far) out of it; returns how many of them were
/// handshakes. A frame of more than `max` bytes, header included, is an error as soon as its header is in.
pub fn take_subscriber_frames(input: &mut Vec<u8>, max: usize) -> Result<usize, SubscriberInputError> {
    take_subscriber_input(input, max).map(|i| i.handshakes)
}

/// What [`take_subscriber_input`] found in whole frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubscriberInput {
    /// Handshake frames.
    pub handshakes: usize,
    /// The history depth the last handshake that asked for one asked for ([`handshake_asking_history`]).
    pub history: Option<u32>,
    /// That handshake asked for the history only ([`handshake_asking_history_only`]).
    pub history_only: bool,
}

/// [`take_subscriber_frames`], also giving the history a shoal subscriber's handshake asks for.
pub fn take_subscriber_input(input: &mut Vec<u8>, max: usize) -> Result<SubscriberInput, SubscriberInputError> {
    let mut at = 0;
    let mut handshakes = 0;
    let mut history = None;
    let mut history_only = false;
    while input.len() - at >= HEADER_LEN {
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(&input[at..at + HEADER_LEN]);
        let header = parse_header(&h).ok_or(SubscriberInputError::BadHeader)?;
        let total = usize::try_from(header.data_size)
            .ok()
            .and_then(|d| d.checked_add(usize::from(header.header_size)))
            .filter(|t| *t <= max)
            .ok_or(SubscriberInputError::Oversized)?;
        if input.len() - at < total {
            break;
        }
        if header.kind == TYPE_HANDSHAKE {
            handshakes += 1;
            let data = &input[at + usize::from(header.header_size)..at + total];
            if let Some((depth, only)) = asked_history(data) {
                history = Some(depth);
                history_only = only;
            }
        }
        at += total;
    }
    input.drain(..at);
    Ok(SubscriberInput { handshakes, history, history_only })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_round_trips_and_aligns_the_payload() {
        for topic in ["t", "a_longer_topic_name", "x".repeat(300).as_str()] {
            for payload in [&b""[..], b"hello", &[7u8; 70_000][..]] {
                let f = encode_message(topic, "123456789", 123_456_789, 42, 1_700_000_000_000_000, payload).unwrap();
                let h = parse_header(f[..HEADER_LEN].try_into().unwrap()).unwrap();
                assert_eq!(h, FrameHeader { header_size: 12, kind: 0, data_size: (f.len() - HEADER_LEN) as u64 });
                let data = &f[HEADER_LEN..];
                let m = decode_message(data).unwrap();
                assert_eq!((m.publisher_id, m.clock, m.time_us), (123_456_789, 42, 1_700_000_000_000_000));
                assert_eq!(&data[m.payload.clone()], payload);
                assert_eq!(m.payload.start % 8, 0, "payload 8-byte aligned after the magic");
                let s = pb::Sample::decode(&data[6..m.payload.start]).unwrap();
                assert_eq!(s.cmd_type, 0);
                assert_eq!(s.content.unwrap().hash, content_hash(123_456_789, 42) as i64);
            }
        }
    }

    /// Bytes an eCAL 6.1.1 Python publisher (`tools/tests/ecal/pub.py --layer tcp --size 40`, topic `cap_topic`)
    /// sent to a raw tcp_pubsub client after its handshake: its handshake answer, then message 42.
    const ECAL_HANDSHAKE: &str = "0c000100010000000000000000";
    const ECAL_MESSAGE_42: &str = "0c00000070000000000000004543414c420008002a213a096361705f746f706963321037363239373734\
        3730393538373936381800120032180800102a189e99b69ee9b29803302838d480a0dad5e7c60d4201002a00000000000000c0ba7fe2\
        22160000653638e9d11ded7e161718191a1b1c1d1e1f202122232425";

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn frames_are_byte_for_byte_what_ecal_6_1_1_sends() {
        assert_eq!(handshake().to_vec(), unhex(ECAL_HANDSHAKE));
        let captured = unhex(ECAL_MESSAGE_42);
        let m = decode_message(&captured[HEADER_LEN..]).unwrap();
        assert_eq!((m.publisher_id, m.clock), (7_629_774_709_587_968, 42));
        let payload = &captured[HEADER_LEN..][m.payload.clone()];
        assert_eq!(payload.len(), 40);
        let ours =
            encode_message("cap_topic", "7629774709587968", m.publisher_id, m.clock, m.time_us, payload).unwrap();
        assert_eq!(ours, captured);
    }

    #[test]
    fn bad_frames_are_errors() {
        let f = encode_message("t", "5", 5, 1, 0, b"abc").unwrap();
        let data = &f[HEADER_LEN..];
        assert!(matches!(decode_message(b"ECA"), Err(DecodeError::NoMagic)));
        assert!(matches!(decode_message(b"XCAL\0\0"), Err(DecodeError::NoMagic)));
        assert!(matches!(decode_message(&data[..10]), Err(DecodeError::HeaderPastEnd(_))));
        assert!(matches!(decode_message(&data[..data.len() - 1]), Err(DecodeError::BadSize { size: 3, left: 2 })));
        let mut bad = data.to_vec();
        bad[4] = 0;
        bad[5] = 0;
        assert!(decode_message(&bad).is_err());
        assert!(parse_header(&[11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_none());
        assert_eq!(handshake(), [12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_handshake_asking_for_history_is_a_handshake_whose_version_byte_comes_first() {
        let ask = handshake_asking_history(7);
        let h = parse_header(ask[..HEADER_LEN].try_into().unwrap()).unwrap();
        assert_eq!((h.kind, h.data_size), (TYPE_HANDSHAKE, 9));
        // tcp_pubsub's publisher copies only the first data byte: the version, 0, as in a plain handshake.
        assert_eq!(ask[HEADER_LEN], handshake()[HEADER_LEN]);
        let mut input = ask.to_vec();
        assert_eq!(
            take_subscriber_input(&mut input, 4096),
            Ok(SubscriberInput { handshakes: 1, history: Some(7), history_only: false })
        );
        let mut input = handshake().to_vec();
        assert_eq!(
            take_subscriber_input(&mut input, 4096),
            Ok(SubscriberInput { handshakes: 1, history: None, history_only: false })
        );
        // Split anywhere, the request is read once its frame is whole.
        let mut input = ask[..15].to_vec();
        assert_eq!(take_subscriber_input(&mut input, 4096), Ok(SubscriberInput::default()));
        input.extend_from_slice(&ask[15..]);
        assert_eq!(take_subscriber_input(&mut input, 4096).unwrap().history, Some(7));
        assert!(input.is_empty());
        // Asking for the history only.
        let only = handshake_asking_history_only(u32::MAX);
        assert_eq!(only[HEADER_LEN], handshake()[HEADER_LEN]);
        let mut input = only.to_vec();
        assert_eq!(
            take_subscriber_input(&mut input, 4096),
            Ok(SubscriberInput { handshakes: 1, history: Some(u32::MAX), history_only: true })
        );
        let end = parse_header(&history_end()).unwrap();
        assert_eq!((end.kind, end.data_size), (TYPE_HISTORY_END, 0));
    }
}
