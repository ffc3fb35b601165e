//! Byte formats shared with eCAL.
//!
//! - [`header`]: the 24-byte ecaludp v5 datagram header.
//! - [`frame`]: the `[u16 name_len][name\0][payload]` message framing and its split into
//!   datagrams (fragmentation above 65483 bytes by default).
//! - [`reassembly`]: the bounded, sans-IO [`Reassembler`] for fragmented messages.
//!
//! - [`pb`]: eCAL's protobuf messages (`eCAL.pb.Sample`: registration and data samples), generated from
//!   `core/proto/`.
//! - [`data_sample`]: eCAL's data sample (cmd 1) as the UDP and TCP layers carry it, and its `content.hash`.
//! - [`service`]: the frames of eCAL's service protocol (version 1, over TCP).
//!
//! - [`auth`]: the optional authentication envelope (`[shoal_auth]`) around those datagrams, and replay
//!   protection.
//!
//! Nothing here panics on received bytes: decoders return [`WireError`] and the reassembler
//! counts every drop in [`ReassemblyCounters`].

pub mod auth;
pub mod data_sample;
pub mod frame;
pub mod header;
pub mod packed;
pub mod pb;
pub mod reassembly;
pub mod service;

#[cfg(test)]
mod tests;

pub use frame::{
    DatagramPart, EncodeError, MAX_PIECES, SendFramedError, begin_framed, encode_message, framed_len, send_framed,
    send_framed_pieces, split_name,
};
pub use header::{
    DEFAULT_MAX_FRAGMENT_PAYLOAD, DatagramHeader, DatagramKind, HEADER_LEN, MAGIC, MAX_DATAGRAM_LEN, VERSION,
};
pub use reassembly::{Reassembler, ReassemblyConfig, ReassemblyCounters};

/// Why received eCAL bytes were rejected (header, reassembly or name framing).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer than 24 bytes.
    #[error("datagram of {len} bytes is shorter than the 24-byte header")]
    TooShort {
        /// Bytes received.
        len: usize,
    },
    /// The first four bytes are not `ECAL`.
    #[error("bad magic (not \"ECAL\")")]
    BadMagic,
    /// Header version other than 5.
    #[error("unsupported ecaludp header version {0}")]
    UnsupportedVersion(u8),
    /// Datagram type other than 1, 2, 3.
    #[error("unknown datagram type {0}")]
    UnknownType(u32),
    /// `len` is larger than the bytes after the header.
    #[error("header declares {declared} payload bytes but only {available} follow")]
    LengthExceedsDatagram {
        /// Declared length.
        declared: u32,
        /// Bytes actually present after the header.
        available: usize,
    },
    /// A message larger than the reassembly byte cap.
    #[error("message of {declared} bytes exceeds the reassembly limit of {limit}")]
    MessageTooLarge {
        /// Declared (or received) size.
        declared: u64,
        /// The configured cap.
        limit: usize,
    },
    /// An info datagram with an impossible fragment count.
    #[error("invalid fragment info: {count} fragments for {total} bytes")]
    InvalidFragmentInfo {
        /// Announced fragment count.
        count: u32,
        /// Announced total length.
        total: u32,
    },
    /// A fragment index at or beyond the fragment count.
    #[error("fragment index {index} out of range (count {count})")]
    FragmentIndexOutOfRange {
        /// The index received.
        index: u32,
        /// The announced count (or the bound used before the info arrived).
        count: u32,
    },
    /// A fragment index received twice.
    #[error("duplicate fragment {index}")]
    DuplicateFragment {
        /// The repeated index.
        index: u32,
    },
    /// A second info datagram for the same message.
    #[error("duplicate fragment info")]
    DuplicateInfo,
    /// Too many incomplete messages at once.
    #[error("too many messages in reassembly (limit {limit})")]
    TooManyInFlight {
        /// The configured cap.
        limit: usize,
    },
    /// The reassembly byte budget is exhausted.
    #[error("reassembly buffer full (limit {limit} bytes)")]
    BufferFull {
        /// The configured cap.
        limit: usize,
    },
    /// Fragment sizes do not add up to the declared total.
    #[error("fragments carry {received} bytes, info declared {declared}")]
    LengthMismatch {
        /// Declared total.
        declared: u64,
        /// Bytes received.
        received: u64,
    },
    /// The u16 name length points past the end of the message.
    #[error("name prefix needs {declared} bytes but the message has {available}")]
    NamePrefixTruncated {
        /// Bytes in the message.
        available: usize,
        /// Bytes the prefix requires.
        declared: usize,
    },
    /// The sample name is not UTF-8.
    #[error("sample name is not valid UTF-8")]
    NameNotUtf8,
}
