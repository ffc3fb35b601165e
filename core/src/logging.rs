//! Log messages on eCAL's log channel, both ways: a [`tracing`] layer that sends an application's records as eCAL
//! 6.1.1 log messages, and a receiver of every process's log messages (shoal's and eCAL's).
//!
//! eCAL sends each log record as one `eCAL.pb.LogMessage` (time in µs since the epoch, host name, process id,
//! process name, unit name, `eLogLevel`, content) framed as a UDP sample named `_log_message_` (the ecaludp framing
//! registration uses, [`crate::wire`]) to the registration address (`[network]`: the local broadcast address, or
//! the multicast group in network mode) on port 14001 (`[shoal_logging] port`). Nothing else is sent on that port;
//! `LogMessageList` is only what eCAL's receiver hands its API, never a datagram.
//!
//! - [`LogLayer`]: a `tracing_subscriber::Layer` the **application** installs (the library never installs one):
//!
//!   ```no_run
//!   use tracing_subscriber::layer::SubscriberExt;
//!   let cfg = shoal::Config::load()?;
//!   let layer = shoal::logging::LogLayer::new(&cfg)?.unit_name("my_app");
//!   let stats = layer.stats_handle();
//!   tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))?;
//!   tracing::warn!(speed = 3, "too fast"); // an eCAL log message "too fast speed=3", level warning
//!   let _sent = stats.stats().sent;
//!   # Ok::<(), Box<dyn std::error::Error>>(())
//!   ```
//!
//!   Records whose level `[monitoring] filter_log_udp` selects (tracing's ERROR is eCAL's error, WARN warning,
//!   INFO info, DEBUG debug1, TRACE debug2) become messages whose content is the message and the event's fields
//!   (`key=value`), cut at `[shoal_logging] max_record` bytes. `on_event` formats the record, takes a token of the
//!   rate limit (`max_rate` records/s) and pushes it into a bounded queue (`queue` records); all three refusals are
//!   counted ([`LogLayerStats`]), none waits.
//!
//!   **Why its own thread.** The queue is drained by one thread, `shoal-log`, started with the layer, which encodes
//!   and sends, up to 64 records per `sendmmsg` (non-blocking; a datagram the socket refuses is a counted drop),
//!   and naps 10 ms after a busy turn, so a stream of records costs one wake-up per nap, not one per record. shoal's I/O thread would be the natural
//!   sender, but it exists only once a [`Node`](crate::Node) does, and an application installs its subscriber
//!   first, logs before any node and after the last one; a layer that depended on a node would lose exactly the
//!   start-up and shut-down records. The sender thread logs nothing itself (it would feed its own queue).
//!
//! - [`LogReceiver`]: binds the log port (`SO_REUSEADDR`, so any number of receivers of a host, eCAL's included,
//!   each get every message), joins the multicast group in network mode, and yields decoded [`LogRecord`]s that
//!   pass its [`LogFilter`] (level at or above, process, host, text). In local mode a message from another host is
//!   dropped and counted, as registration's.
//! - [`LogDecoder`]: the sans-IO decoder the receiver uses: ecaludp datagrams (reassembled when fragmented, within
//!   a byte cap) into records. Bad input is data: every datagram either yields a record or is counted under one
//!   reason ([`LogDecodeCounters`]), never a panic; memory is bounded by the reassembler's caps.

mod layer;
mod receiver;
#[cfg(test)]
mod tests;
mod wire;

pub use layer::{LogLayer, LogLayerError, LogLayerStats, LogStatsHandle};
pub use receiver::{LogReceiveError, LogReceiver};
pub use wire::{LOG_SAMPLE_NAME, LogDecodeCounters, LogDecodeError, LogDecoder, decode_record, encode_record};

use std::fmt;

/// eCAL's log levels (`eCAL::Logging::eLogLevel`), with the bit each has in eCAL's level filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum LogLevel {
    /// `log_level_debug4` (128).
    Debug4,
    /// `log_level_debug3` (64).
    Debug3,
    /// `log_level_debug2` (32).
    Debug2,
    /// `log_level_debug1` (16).
    Debug1,
    /// `log_level_info` (1).
    Info,
    /// `log_level_warning` (2).
    Warning,
    /// `log_level_error` (4).
    Error,
    /// `log_level_fatal` (8).
    Fatal,
    /// A value eCAL does not define, as received.
    Other(i32),
}

impl LogLevel {
    /// The levels eCAL defines, least severe first.
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug4,
        LogLevel::Debug3,
        LogLevel::Debug2,
        LogLevel::Debug1,
        LogLevel::Info,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Fatal,
    ];

    /// The level of eCAL's wire value (`LogMessage.level`).
    pub fn from_wire(v: i32) -> LogLevel {
        LogLevel::ALL.into_iter().find(|l| l.to_wire() == v).unwrap_or(LogLevel::Other(v))
    }

    /// eCAL's wire value (`eLogLevel`).
    pub fn to_wire(self) -> i32 {
        match self {
            LogLevel::Info => 1,
            LogLevel::Warning => 2,
            LogLevel::Error => 4,
            LogLevel::Fatal => 8,
            LogLevel::Debug1 => 16,
            LogLevel::Debug2 => 32,
            LogLevel::Debug3 => 64,
            LogLevel::Debug4 => 128,
            LogLevel::Other(v) => v,
        }
    }

    /// The level's bit in an eCAL level filter (`[monitoring] filter_log_udp`); 0 for [`LogLevel::Other`].
    pub fn bit(self) -> u8 {
        match self {
            LogLevel::Other(_) => 0,
            l => u8::try_from(l.to_wire()).unwrap_or(0),
        }
    }

    /// Severity rank: debug4 0 … debug1 3, info 4, warning 5, error 6, fatal 7; an unknown level ranks as info.
    pub fn severity(self) -> u8 {
        match self {
            LogLevel::Debug4 => 0,
            LogLevel::Debug3 => 1,
            LogLevel::Debug2 => 2,
            LogLevel::Debug1 => 3,
            LogLevel::Info | LogLevel::Other(_) => 4,
            LogLevel::Warning => 5,
            LogLevel::Error => 6,
            LogLevel::Fatal => 7,
        }
    }

    /// eCAL's level of a tracing level: ERROR error, WARN warning, INFO info, DEBUG debug1, TRACE debug2.
    pub fn from_tracing(level: tracing::Level) -> LogLevel {
        match level {
            tracing::Level::ERROR => LogLevel::Error,
            tracing::Level::WARN => LogLevel::Warning,
            tracing::Level::INFO => LogLevel::Info,
            tracing::Level::DEBUG => LogLevel::Debug1,
            tracing::Level::TRACE => LogLevel::Debug2,
        }
    }

    /// eCAL's name of the level (`info`, `warning`, …; `level_N` for an unknown one).
    pub fn name(self) -> std::borrow::Cow<'static, str> {
        match self {
            LogLevel::Info => "info".into(),
            LogLevel::Warning => "warning".into(),
            LogLevel::Error => "error".into(),
            LogLevel::Fatal => "fatal".into(),
            LogLevel::Debug1 => "debug1".into(),
            LogLevel::Debug2 => "debug2".into(),
            LogLevel::Debug3 => "debug3".into(),
            LogLevel::Debug4 => "debug4".into(),
            LogLevel::Other(v) => format!("level_{v}").into(),
        }
    }

    /// The level named `name` (eCAL's names, also `warn` and `debug` for debug1; case-insensitive).
    pub fn parse(name: &str) -> Option<LogLevel> {
        let n = name.trim().to_ascii_lowercase();
        match n.as_str() {
            "warn" => Some(LogLevel::Warning),
            "debug" => Some(LogLevel::Debug1),
            _ => LogLevel::ALL.into_iter().find(|l| l.name() == n),
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// One log message as eCAL sends it (`eCAL.pb.LogMessage`). Text received is kept as sent; bytes that are not
/// UTF-8 are replaced (U+FFFD). Print names with [`crate::monitor::printable`]: they come from the network.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LogRecord {
    /// When it was logged, µs since the Unix epoch (eCAL's clock).
    pub time_us: i64,
    /// The sending host.
    pub host_name: String,
    /// The sending process's id.
    pub process_id: i32,
    /// The sending process's name (eCAL: its executable's path).
    pub process_name: String,
    /// The sending process's unit name (the name it initialised eCAL or its shoal node with).
    pub unit_name: String,
    /// Its level.
    pub level: LogLevel,
    /// The message.
    pub content: String,
}

/// Which received records a [`LogReceiver`] yields; every condition set must hold. Text conditions are
/// case-insensitive substrings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    /// Records at or above this severity only ([`LogLevel::severity`]).
    pub min_level: Option<LogLevel>,
    /// The process name or the unit name contains this.
    pub process: Option<String>,
    /// The host name contains this.
    pub host: Option<String>,
    /// The content contains this.
    pub text: Option<String>,
}

impl LogFilter {
    /// Whether `record` passes.
    pub fn matches(&self, record: &LogRecord) -> bool {
        fn contains(hay: &str, needle: &str) -> bool {
            needle.is_empty() || hay.to_lowercase().contains(&needle.to_lowercase())
        }
        self.min_level.is_none_or(|min| record.level.severity() >= min.severity())
            && self
                .process
                .as_deref()
                .is_none_or(|p| contains(&record.process_name, p) || contains(&record.unit_name, p))
            && self.host.as_deref().is_none_or(|h| contains(&record.host_name, h))
            && self.text.as_deref().is_none_or(|t| contains(&record.content, t))
    }
}
