//! eCAL's log message on the wire: `eCAL.pb.LogMessage` (eCAL's `logging.proto`), framed as the UDP sample
//! [`LOG_SAMPLE_NAME`], and the bounded, sans-IO [`LogDecoder`] of received datagrams.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{LogLevel, LogRecord};
use crate::wire::{Reassembler, ReassemblyConfig, WireError, split_name};

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
    prost::Message::encode_to_vec(&LogMessage {
        time: record.time_us,
        host_name: record.host_name.as_bytes().to_vec(),
        process_id: record.process_id,
        process_name: record.process_name.as_bytes().to_vec(),
        unit_name: record.unit_name.as_bytes().to_vec(),
        level: record.level.to_wire(),
        content: record.content.as_bytes().to_vec(),
    })
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

/// The datagram(s) of `record`: framed under [`LOG_SAMPLE_NAME`], one datagram when it fits (the layer's records
/// always do), fragmented otherwise.
pub(super) fn encode_datagrams(record: &LogRecord, id: &mut impl FnMut() -> i32) -> Vec<Vec<u8>> {
    let payload = encode_record(record);
    // Only a name over 64 KiB or a message over 4 GiB fails; neither can be made here.
    crate::wire::encode_message(LOG_SAMPLE_NAME, &payload, crate::wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, id)
        .unwrap_or_default()
}
