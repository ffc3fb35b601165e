//! eCAL's data sample: the `Sample` protobuf (cmd 1, `set_sample`) a UDP data datagram carries, and the
//! `content.hash` every layer's header carries (the TCP layer's sample header and the shared-memory layer's memfile
//! header too; [`content_hash`]). The varint helpers serve the TCP layer's header encoder as well.
//!
//! The encoder writes exactly the fields, in exactly the order, eCAL 6.1.1's protozero serializer writes them
//! (`ecal_serialize_sample_payload.cpp`), straight into a caller-owned buffer, so a publisher reuses one buffer
//! for all its messages. The decoder is prost's (fields in any order, unknown fields skipped) and never panics.

use prost::Message;

use crate::wire::pb::{self, TopicIdError, parse_topic_id};

/// Why the protobuf of a received data datagram was rejected.
#[derive(Debug, thiserror::Error)]
pub enum DataDecodeError {
    /// Not a valid `eCAL.pb.Sample`.
    #[error("invalid data sample protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// A sample with another command than 1 (`set_sample`).
    #[error("sample command {0} is not a data sample (1)")]
    NotData(i32),
    /// The `topic` field is missing.
    #[error("data sample without topic")]
    MissingTopic,
    /// The `content` field is missing.
    #[error("data sample without content")]
    MissingContent,
    /// `topic_id` is not a decimal u64 (eCAL drops such samples too).
    #[error(transparent)]
    BadTopicId(#[from] TopicIdError),
    /// A negative clock.
    #[error("negative clock {0}")]
    NegativeClock(i64),
}

/// A decoded data sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataSample {
    /// `topic.topic_name`.
    pub topic_name: String,
    /// `topic.topic_id` parsed as u64: the publisher's entity id.
    pub publisher_id: u64,
    /// `topic.host_name`.
    pub host_name: String,
    /// `content.clock`: the publisher's send counter.
    pub clock: u64,
    /// `content.time`: send time, µs since the UNIX epoch.
    pub time_us: i64,
    /// `content.payload`: a range of the decoded buffer when that was a [`bytes::Bytes`], else a copy.
    pub payload: bytes::Bytes,
}

/// The fields of one outgoing data sample.
#[derive(Debug, Clone, Copy)]
pub struct DataSampleRef<'a> {
    /// Topic name.
    pub topic_name: &'a str,
    /// The publisher's entity id as a decimal string (eCAL `topic_id`).
    pub topic_id: &'a str,
    /// The publisher's entity id (for the hash).
    pub publisher_id: u64,
    /// `gethostname()` of the publisher.
    pub host_name: &'a str,
    /// Send counter (1, 2, ...).
    pub clock: u64,
    /// Send time, µs since the UNIX epoch.
    pub time_us: i64,
    /// The message.
    pub payload: &'a [u8],
}

/// Bytes of `v` as a protobuf varint.
pub(crate) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Appends `v` as a protobuf varint.
pub(crate) fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Tag byte of field `n` (< 16) with wire type `t`.
const fn tag(n: u8, t: u8) -> u8 {
    (n << 3) | t
}

const VARINT: u8 = 0;
const LEN: u8 = 2;

fn bytes_field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

fn put_bytes_field(buf: &mut Vec<u8>, field: u8, data: &[u8]) {
    buf.push(tag(field, LEN));
    put_varint(buf, data.len() as u64);
    buf.extend_from_slice(data);
}

/// eCAL's `Content.hash`: `topic_id ^ (clock << 1)` (libstdc++ `std::hash` of `SSndHash`), the same in every
/// layer.
pub fn content_hash(publisher_id: u64, clock: u64) -> u64 {
    publisher_id ^ (clock << 1)
}

/// Appends the protobuf `eCAL.pb.Sample` of a data sample to `buf`, field for field as eCAL 6.1.1 writes it:
/// `1 cmd_type = 1`, `5 topic {7 topic_name, 6 topic_id, 3 process_id = 0, 2 host_name}`,
/// `6 content {1 id = 0, 2 clock, 3 time, 6 size = 0, 4 payload, 7 hash}`, `8 padding = ""`.
pub fn encode_data_sample(buf: &mut Vec<u8>, s: &DataSampleRef<'_>) {
    let tail = encode_data_sample_head(buf, s);
    buf.reserve(s.payload.len() + tail.len());
    buf.extend_from_slice(s.payload);
    buf.extend_from_slice(tail.as_slice());
}

/// The bytes of a data sample that follow its payload ([`encode_data_sample_head`]): the hash field and the
/// padding, at most 14 bytes.
#[derive(Debug, Clone, Copy)]
pub struct DataSampleTail {
    bytes: [u8; 14],
    len: u8,
}

impl DataSampleTail {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Their number.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Never true (the tail holds at least the hash and padding tags).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// [`encode_data_sample`] without its payload: appends to `buf` the bytes before the payload (up to its length
/// prefix) and returns those after it, so the payload can be sent from where it is (the sample is `buf`'s new
/// bytes, then `s.payload`, then the tail).
pub fn encode_data_sample_head(buf: &mut Vec<u8>, s: &DataSampleRef<'_>) -> DataSampleTail {
    let topic_len = bytes_field_len(s.topic_name.len())
        + bytes_field_len(s.topic_id.len())
        + 2
        + bytes_field_len(s.host_name.len());
    let hash = content_hash(s.publisher_id, s.clock);
    let content_len = 2
        + 1
        + varint_len(s.clock)
        + 1
        + varint_len(s.time_us as u64)
        + 2
        + bytes_field_len(s.payload.len())
        + 1
        + varint_len(hash);
    buf.reserve(2 + 1 + varint_len(topic_len as u64) + topic_len + 1 + varint_len(content_len as u64) + 32);
    buf.extend_from_slice(&[tag(1, VARINT), pb::CMD_SET_SAMPLE as u8]);
    buf.push(tag(5, LEN));
    put_varint(buf, topic_len as u64);
    put_bytes_field(buf, 7, s.topic_name.as_bytes());
    put_bytes_field(buf, 6, s.topic_id.as_bytes());
    buf.extend_from_slice(&[tag(3, VARINT), 0]);
    put_bytes_field(buf, 2, s.host_name.as_bytes());
    buf.push(tag(6, LEN));
    put_varint(buf, content_len as u64);
    buf.extend_from_slice(&[tag(1, VARINT), 0]);
    buf.push(tag(2, VARINT));
    put_varint(buf, s.clock);
    buf.push(tag(3, VARINT));
    put_varint(buf, s.time_us as u64);
    buf.extend_from_slice(&[tag(6, VARINT), 0]);
    buf.push(tag(4, LEN));
    put_varint(buf, s.payload.len() as u64);
    // 1 + at most 10 varint bytes + 2.
    let mut bytes = [0u8; 14];
    bytes[0] = tag(7, VARINT);
    let mut n = 1;
    let mut v = hash;
    while v >= 0x80 {
        bytes[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    bytes[n] = v as u8;
    bytes[n + 1] = tag(8, LEN);
    bytes[n + 2] = 0;
    DataSampleTail { bytes, len: (n + 3) as u8 }
}

/// Decodes the protobuf of a data datagram (after the topic-name prefix); the payload is copied.
pub fn decode_data_sample(bytes: &[u8]) -> Result<DataSample, DataDecodeError> {
    decode_data_sample_from(bytes)
}

/// [`decode_data_sample`] from a buffer the payload may stay in: from a [`bytes::Bytes`] the payload is a range of
/// it (no copy).
pub fn decode_data_sample_from(bytes: impl bytes::Buf) -> Result<DataSample, DataDecodeError> {
    let s = pb::Sample::decode(bytes)?;
    if s.cmd_type != pb::CMD_SET_SAMPLE {
        return Err(DataDecodeError::NotData(s.cmd_type));
    }
    let topic = s.topic.ok_or(DataDecodeError::MissingTopic)?;
    let content = s.content.ok_or(DataDecodeError::MissingContent)?;
    let publisher_id = parse_topic_id(&topic.topic_id)?;
    let clock = u64::try_from(content.clock).map_err(|_| DataDecodeError::NegativeClock(content.clock))?;
    Ok(DataSample {
        topic_name: topic.topic_name,
        publisher_id,
        host_name: topic.host_name,
        clock,
        time_us: content.time,
        payload: content.payload,
    })
}
