//! eCAL's log message on the wire: `eCAL.pb.LogMessage` (eCAL's `logging.proto`), framed as the UDP sample
//! [`LOG_SAMPLE_NAME`], and the bounded, sans-IO [`LogDecoder`] of received datagrams.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{LogLevel, LogRecord};
use crate::wire::{
    DEFAULT_MAX_FRAGMENT_PAYLOAD, DatagramHeader, HEADER_LEN, Reassembler, ReassemblyConfig, WireError, begin_framed,
    encode_message, framed_len, split_name,
};

/// The sample name eCAL's log provider sends under and its receiver accepts (`_log_message_`).
pub const LOG_SAMPLE_NAME: &str = "_log_message_";

/// Largest reassembled log message the decoder accepts (eCAL's own records fit a datagram; a fragmented one is
/// rare and bounded by this).
const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// `eCAL.pb.LogMessage`. The string fields are read as bytes (same wire type) so that text that is not UTF-8 is
/// data, not a decoding error.
#[derive(Clone, PartialEq, prost::Message)]
struct LogMessage {
    #[prost(int64, tag = "1")]
    time: i64,
    #[prost(bytes = "vec", tag = "2")]
    host_name: Vec<u8>,
    #[prost(int32, tag = "3")]
    process_id: i32,
    #[prost(bytes = "vec", tag = "4")]
    process_name: Vec<u8>,
    #[prost(bytes = "vec", tag = "5")]
    unit_name: Vec<u8>,
    #[prost(int32, tag = "6")]
    level: i32,
    #[prost(bytes = "vec", tag = "7")]
    content: Vec<u8>,
}

/// The protobuf bytes of `record` (`eCAL.pb.LogMessage`; frame them under [`LOG_SAMPLE_NAME`]).
pub fn encode_record(record: &LogRecord) -> Vec<u8> {
    let mut buf = Vec::new();
    append_record(&mut buf, record);
    buf
}

/// Appends `record` as `eCAL.pb.LogMessage` to `buf`, field by field as prost writes it (proto3: fields at their
/// default value are left out), without copying the strings into a message first.
fn append_record(buf: &mut Vec<u8>, record: &LogRecord) {
    use prost::encoding::{WireType, encode_key, encode_varint};
    let int = |tag: u32, v: i64, buf: &mut Vec<u8>| {
        if v != 0 {
            encode_key(tag, WireType::Varint, buf);
            // int32 and int64 alike: a negative value is its 64-bit two's complement (10 bytes).
            encode_varint(v as u64, buf);
        }
    };
    let text = |tag: u32, v: &str, buf: &mut Vec<u8>| {
        if !v.is_empty() {
            encode_key(tag, WireType::LengthDelimited, buf);
            encode_varint(v.len() as u64, buf);
            buf.extend_from_slice(v.as_bytes());
        }
    };
    int(1, record.time_us, buf);
    text(2, &record.host_name, buf);
    int(3, i64::from(record.process_id), buf);
    text(4, &record.process_name, buf);
    text(5, &record.unit_name, buf);
    int(6, i64::from(record.level.to_wire()), buf);
    text(7, &record.content, buf);
}

/// The record in `eCAL.pb.LogMessage` protobuf bytes.
pub fn decode_record(bytes: &[u8]) -> Result<LogRecord, LogDecodeError> {
    let m: LogMessage = prost::Message::decode(bytes).map_err(|e| LogDecodeError::Protobuf(e.to_string()))?;
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    Ok(LogRecord {
        time_us: m.time,
        host_name: text(m.host_name),
        process_id: m.process_id,
        process_name: text(m.process_name),
        unit_name: text(m.unit_name),
        level: LogLevel::from_wire(m.level),
        content: text(m.content),
    })
}

/// Why a received log datagram yielded no record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogDecodeError {
    /// Not an ecaludp datagram, or a fragment the reassembler dropped.
    #[error("datagram: {0}")]
    Wire(#[from] WireError),
    /// A sample under another name than `_log_message_`.
    #[error("sample {0:?} is not a log message")]
    OtherSample(String),
    /// The payload is not an `eCAL.pb.LogMessage`.
    #[error("log message: {0}")]
    Protobuf(String),
    /// Local mode: a datagram from another host.
    #[error("log message from another host ({0}) in local mode")]
    OtherHost(SocketAddr),
}

/// What a [`LogDecoder`] did with the datagrams it was given: a datagram yields a record, is a fragment of a
/// fragmented message, or is counted under one reason; a fragmented message that never completes is counted in
/// `dropped_messages`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogDecodeCounters {
    /// Datagrams pushed.
    pub datagrams: u64,
    /// Records decoded.
    pub records: u64,
    /// Datagrams that are not ecaludp, or fragments the reassembler refused (over its caps, inconsistent).
    pub malformed: u64,
    /// Samples of another name.
    pub other_samples: u64,
    /// `_log_message_` samples whose payload is not a `LogMessage`.
    pub bad_messages: u64,
    /// Local mode: datagrams from another host.
    pub other_host: u64,
    /// Incomplete fragmented messages dropped: by age (5 s), or to make room within the decoder's caps.
    pub dropped_messages: u64,
}

/// Received datagrams → [`LogRecord`]s, sans-IO: reassembles fragmented messages (at most 16 in flight, 1 MiB in
/// all, 4 per sender, 5 s each) and decodes them.
#[derive(Debug)]
pub struct LogDecoder {
    reassembler: Reassembler,
    local_only: bool,
    counters: LogDecodeCounters,
}

impl LogDecoder {
    /// A decoder; with `local_only` (local mode) datagrams from a non-loopback address are dropped and counted.
    pub fn new(local_only: bool) -> Self {
        let cfg = ReassemblyConfig {
            max_age: Duration::from_secs(5),
            max_messages: 16,
            max_bytes: MAX_MESSAGE_BYTES,
            max_per_source: 4,
        };
        LogDecoder { reassembler: Reassembler::new(cfg), local_only, counters: LogDecodeCounters::default() }
    }

    /// What was decoded and dropped so far.
    pub fn counters(&self) -> LogDecodeCounters {
        let r = self.reassembler.counters();
        LogDecodeCounters {
            dropped_messages: r.expired + r.in_flight_limit + r.source_limit + r.buffer_limit,
            ..self.counters
        }
    }

    /// One received datagram: the record it completes, `Ok(None)` for a fragment of an incomplete message, or why
    /// it was dropped (counted).
    pub fn push(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
    ) -> Result<Option<LogRecord>, LogDecodeError> {
        self.counters.datagrams += 1;
        if self.local_only && !from.ip().is_loopback() {
            self.counters.other_host += 1;
            return Err(LogDecodeError::OtherHost(from));
        }
        let framed = match self.reassembler.push(now, from, datagram) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(None),
            Err(e) => {
                self.counters.malformed += 1;
                return Err(e.into());
            }
        };
        let (name, payload) = match split_name(&framed) {
            Ok(v) => v,
            Err(e) => {
                self.counters.malformed += 1;
                return Err(e.into());
            }
        };
        if name != LOG_SAMPLE_NAME {
            self.counters.other_samples += 1;
            return Err(LogDecodeError::OtherSample(name.chars().take(64).collect()));
        }
        match decode_record(payload) {
            Ok(r) => {
                self.counters.records += 1;
                Ok(Some(r))
            }
            Err(e) => {
                self.counters.bad_messages += 1;
                Err(e)
            }
        }
    }

    /// Drops incomplete messages older than their age limit (call now and then when nothing arrives).
    pub fn expire(&mut self, now: Instant) {
        self.reassembler.expire(now);
    }
}

/// The datagram(s) of `record`: framed under [`LOG_SAMPLE_NAME`], one datagram (the message encoded in place after
/// its header) when it fits, as the layer's records do unless the process and host names are very long; fragmented
/// otherwise.
pub(super) fn encode_datagrams(record: &LogRecord, id: &mut impl FnMut() -> i32) -> Vec<Vec<u8>> {
    let mut buf = Vec::with_capacity(HEADER_LEN + 64 + record.content.len() + record.process_name.len());
    // Only a name with a NUL or over 64 KiB fails; the constant name has neither.
    if begin_framed(&mut buf, LOG_SAMPLE_NAME).is_err() {
        return Vec::new();
    }
    append_record(&mut buf, record);
    let framed = buf.len() - HEADER_LEN;
    if framed <= DEFAULT_MAX_FRAGMENT_PAYLOAD {
        let header = DatagramHeader::whole(framed as u32).to_bytes();
        buf[..HEADER_LEN].copy_from_slice(&header);
        return vec![buf];
    }
    // Only a message over 4 GiB fails; a record is far smaller.
    encode_message(
        LOG_SAMPLE_NAME,
        &buf[HEADER_LEN + framed_len(LOG_SAMPLE_NAME, 0)..],
        DEFAULT_MAX_FRAGMENT_PAYLOAD,
        id,
    )
    .unwrap_or_default()
}
