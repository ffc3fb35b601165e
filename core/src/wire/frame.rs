//! The eCAL message framing on top of ecaludp: `[u16 LE name_len][name + NUL][payload]`,
//! split into datagrams (`CSampleSender::Send`, ecaludp `datagram_builder_v5.cpp`).

use std::io::IoSlice;

use super::WireError;
use super::header::{DatagramHeader, DatagramKind, HEADER_LEN};

/// Why a message could not be framed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The name (plus its NUL) does not fit the u16 length prefix.
    #[error("sample name is {len} bytes; at most 65534 fit the u16 length prefix")]
    NameTooLong {
        /// Length of the name in bytes.
        len: usize,
    },
    /// The name contains a NUL byte, which would cut it short at the receiver.
    #[error("sample name contains a NUL byte")]
    NameContainsNul,
    /// The framed message is longer than the u32 length field allows.
    #[error("framed message of {len} bytes exceeds the u32 length field")]
    MessageTooLarge {
        /// Length of the framed message in bytes.
        len: usize,
    },
    /// `max_fragment_payload` was zero.
    #[error("max_fragment_payload must be at least 1")]
    ZeroFragmentSize,
    /// [`send_framed_pieces`] was given more than [`MAX_PIECES`] pieces.
    #[error("a message in {pieces} pieces; at most {MAX_PIECES} are sent without copying")]
    TooManyPieces {
        /// Pieces given.
        pieces: usize,
    },
}

/// Length of the framed message (name prefix + payload) for `name` and `payload_len`.
pub fn framed_len(name: &str, payload_len: usize) -> usize {
    2 + name.len() + 1 + payload_len
}

/// Starts a message in `buf` (cleared first): [`HEADER_LEN`] bytes kept free for the datagram header, then the
/// name prefix `[u16 LE strlen(name)+1][name][NUL]`. Append the payload to `buf`, then send it with
/// [`send_framed`].
pub fn begin_framed(buf: &mut Vec<u8>, name: &str) -> Result<(), EncodeError> {
    if name.as_bytes().contains(&0) {
        return Err(EncodeError::NameContainsNul);
    }
    let name_field = u16::try_from(name.len() + 1).map_err(|_| EncodeError::NameTooLong { len: name.len() })?;
    buf.clear();
    buf.resize(HEADER_LEN, 0);
    buf.extend_from_slice(&name_field.to_le_bytes());
    buf.extend_from_slice(name.as_bytes());
    buf.push(0);
    Ok(())
}

/// Which datagram of a message [`send_framed`] was sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatagramPart {
    /// The message in one datagram (type 3).
    Whole,
    /// The fragment info datagram (type 1) announcing `count` fragments.
    FragmentInfo {
        /// Fragments that follow.
        count: u32,
    },
    /// Fragment `index` of `count` (type 2).
    Fragment {
        /// 0-based index.
        index: u32,
        /// Fragments in the message.
        count: u32,
    },
}

impl std::fmt::Display for DatagramPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatagramPart::Whole => write!(f, "datagram"),
            DatagramPart::FragmentInfo { .. } => write!(f, "fragment info"),
            DatagramPart::Fragment { index, count } => write!(f, "fragment {index} of {count}"),
        }
    }
}

/// Why [`send_framed`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum SendFramedError<E> {
    /// The message cannot be framed.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// `send` failed for one datagram (the rest of the message was not sent).
    #[error("{part}: {error}")]
    Send {
        /// The datagram that failed.
        part: DatagramPart,
        /// The error `send` returned.
        error: E,
    },
}

/// Splits the message in `buf` ([`begin_framed`] plus the payload; its first [`HEADER_LEN`] bytes are not sent) into
/// datagrams and hands each to `send` as header and body slices, without copying: one type-3 datagram if the
/// framed message is at most `max_fragment_payload` bytes, else a type-1 info datagram (num = fragment count, len =
/// total length) and type-2 fragments (num = index, len = bytes in it), all with the id `id_source` returns (asked
/// once, and only for a fragmented message). [`send_framed_pieces`] with one piece.
pub fn send_framed<E>(
    buf: &[u8],
    max_fragment_payload: usize,
    id_source: &mut impl FnMut() -> i32,
    send: impl FnMut(&[IoSlice<'_>]) -> Result<(), E>,
) -> Result<(), SendFramedError<E>> {
    send_framed_pieces(&[buf.get(HEADER_LEN..).unwrap_or(&[])], max_fragment_payload, id_source, send)
}

/// Most pieces [`send_framed_pieces`] takes.
pub const MAX_PIECES: usize = 4;

/// [`send_framed`] for a framed message held in pieces (their concatenation is the message: the name prefix, then
/// the rest as the caller has it, say a payload where it lies between two short encoded parts): the same datagrams,
/// byte for byte, each handed to `send` as its header followed by the parts of the pieces it covers (at most
/// [`MAX_PIECES`] + 1 slices), so nothing of the message is copied.
pub fn send_framed_pieces<E>(
    pieces: &[&[u8]],
    max_fragment_payload: usize,
    id_source: &mut impl FnMut() -> i32,
    mut send: impl FnMut(&[IoSlice<'_>]) -> Result<(), E>,
) -> Result<(), SendFramedError<E>> {
    if max_fragment_payload == 0 {
        return Err(EncodeError::ZeroFragmentSize.into());
    }
    if pieces.len() > MAX_PIECES {
        return Err(EncodeError::TooManyPieces { pieces: pieces.len() }.into());
    }
    let total: usize = pieces.iter().map(|p| p.len()).sum();
    let total_u32 = u32::try_from(total).map_err(|_| EncodeError::MessageTooLarge { len: total })?;
    if total <= max_fragment_payload {
        let header = DatagramHeader::whole(total_u32).to_bytes();
        let (slices, n) = gather(pieces, &header, 0, total);
        return send(&slices[..n]).map_err(|error| SendFramedError::Send { part: DatagramPart::Whole, error });
    }
    let count =
        u32::try_from(total.div_ceil(max_fragment_payload)).map_err(|_| EncodeError::MessageTooLarge { len: total })?;
    let id = id_source();
    let info = DatagramHeader { kind: DatagramKind::FragmentInfo, id, num: count, len: total_u32 }.to_bytes();
    send(&[IoSlice::new(&info)])
        .map_err(|error| SendFramedError::Send { part: DatagramPart::FragmentInfo { count }, error })?;
    for index in 0..count {
        let start = index as usize * max_fragment_payload;
        let end = (start + max_fragment_payload).min(total);
        let header =
            DatagramHeader { kind: DatagramKind::Fragment, id, num: index, len: (end - start) as u32 }.to_bytes();
        let (slices, n) = gather(pieces, &header, start, end);
        send(&slices[..n])
            .map_err(|error| SendFramedError::Send { part: DatagramPart::Fragment { index, count }, error })?;
    }
    Ok(())
}

/// The slices of the bytes `start..end` of the concatenated `pieces` after `header`, and how many there are.
fn gather<'a>(
    pieces: &[&'a [u8]],
    header: &'a [u8; HEADER_LEN],
    start: usize,
    end: usize,
) -> ([IoSlice<'a>; MAX_PIECES + 1], usize) {
    let mut out: [IoSlice<'a>; MAX_PIECES + 1] = std::array::from_fn(|_| IoSlice::new(&[]));
    out[0] = IoSlice::new(header);
    let mut n = 1;
    let mut at = 0usize;
    for p in pieces {
        let (lo, hi) = (start.max(at), end.min(at + p.len()));
        if lo < hi {
            out[n] = IoSlice::new(&p[lo - at..hi - at]);
            n += 1;
        }
        at += p.len();
    }
    (out, n)
}

/// Frames `payload` under `name` and splits it into UDP datagrams, each in its own buffer (for registration and
/// tests; the data path sends with [`send_framed`] without copying).
///
/// The framed message is `[u16 LE strlen(name)+1][name][NUL][payload]`. If it is at most
/// `max_fragment_payload` bytes (eCAL: [`DEFAULT_MAX_FRAGMENT_PAYLOAD`](super::DEFAULT_MAX_FRAGMENT_PAYLOAD))
/// the result is one type-3 datagram; otherwise a type-1 info datagram (num = fragment count,
/// len = total length) followed by type-2 fragments (num = index, len = bytes in the fragment),
/// all with the id returned once by `id_source`.
pub fn encode_message(
    name: &str,
    payload: &[u8],
    max_fragment_payload: usize,
    id_source: &mut impl FnMut() -> i32,
) -> Result<Vec<Vec<u8>>, EncodeError> {
    if max_fragment_payload == 0 {
        return Err(EncodeError::ZeroFragmentSize);
    }
    let total = framed_len(name, payload.len());
    if u32::try_from(total).is_err() {
        return Err(EncodeError::MessageTooLarge { len: total });
    }
    let mut buf = Vec::with_capacity(HEADER_LEN + total);
    begin_framed(&mut buf, name)?;
    buf.extend_from_slice(payload);
    let mut out = Vec::new();
    let sent = send_framed(&buf, max_fragment_payload, id_source, |parts| {
        out.push(parts.iter().flat_map(|p| p.iter().copied()).collect());
        Ok::<(), std::convert::Infallible>(())
    });
    match sent {
        Ok(()) => Ok(out),
        Err(SendFramedError::Encode(e)) => Err(e),
        Err(SendFramedError::Send { error, .. }) => match error {},
    }
}

/// Splits a complete framed message into its name and payload.
///
/// Mirrors `CSampleReceiverAsio`: the name is the bytes after the u16 prefix up to the first
/// NUL (within the declared length), the payload starts at `2 + name_len`.
pub fn split_name(framed: &[u8]) -> Result<(&str, &[u8]), WireError> {
    let Some((len_bytes, rest)) = framed.split_first_chunk::<2>() else {
        return Err(WireError::NamePrefixTruncated { available: framed.len(), declared: 2 });
    };
    let declared = u16::from_le_bytes(*len_bytes) as usize;
    if declared > rest.len() {
        return Err(WireError::NamePrefixTruncated { available: framed.len(), declared: declared + 2 });
    }
    let (name_field, payload) = rest.split_at(declared);
    let name_bytes = match name_field.iter().position(|&b| b == 0) {
        Some(nul) => &name_field[..nul],
        None => name_field,
    };
    let name = std::str::from_utf8(name_bytes).map_err(|_| WireError::NameNotUtf8)?;
    Ok((name, payload))
}
