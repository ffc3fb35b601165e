//! The eCAL message framing on top of ecaludp: `[u16 LE name_len][name + NUL][payload]`,
//! split into datagrams (`CSampleSender::Send`, ecaludp `datagram_builder_v5.cpp`).

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
}

/// Length of the framed message (name prefix + payload) for `name` and `payload_len`.
pub fn framed_len(name: &str, payload_len: usize) -> usize {
    2 + name.len() + 1 + payload_len
}

/// Frames `payload` under `name` and splits it into UDP datagrams.
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
    if name.as_bytes().contains(&0) {
        return Err(EncodeError::NameContainsNul);
    }
    let name_field = u16::try_from(name.len() + 1).map_err(|_| EncodeError::NameTooLong { len: name.len() })?;
    let total = framed_len(name, payload.len());
    let total_u32 = u32::try_from(total).map_err(|_| EncodeError::MessageTooLarge { len: total })?;

    let mut framed_prefix = Vec::with_capacity(2 + name.len() + 1);
    framed_prefix.extend_from_slice(&name_field.to_le_bytes());
    framed_prefix.extend_from_slice(name.as_bytes());
    framed_prefix.push(0);

    if total <= max_fragment_payload {
        let mut dgram = Vec::with_capacity(HEADER_LEN + total);
        dgram.extend_from_slice(&DatagramHeader::whole(total_u32).to_bytes());
        dgram.extend_from_slice(&framed_prefix);
        dgram.extend_from_slice(payload);
        return Ok(vec![dgram]);
    }

    let count = total.div_ceil(max_fragment_payload);
    // count <= total <= u32::MAX, so this cannot fail.
    let count_u32 = u32::try_from(count).map_err(|_| EncodeError::MessageTooLarge { len: total })?;
    let id = id_source();
    let mut out = Vec::with_capacity(1 + count);
    out.push(
        DatagramHeader { kind: DatagramKind::FragmentInfo, id, num: count_u32, len: total_u32 }.to_bytes().to_vec(),
    );
    // Walk the virtual concatenation prefix ++ payload in chunks of max_fragment_payload.
    let mut offset = 0usize;
    for index in 0..count_u32 {
        let end = (offset + max_fragment_payload).min(total);
        let chunk_len = end - offset;
        let mut dgram = Vec::with_capacity(HEADER_LEN + chunk_len);
        let header = DatagramHeader { kind: DatagramKind::Fragment, id, num: index, len: chunk_len as u32 };
        dgram.extend_from_slice(&header.to_bytes());
        let plen = framed_prefix.len();
        if offset < plen {
            dgram.extend_from_slice(&framed_prefix[offset..end.min(plen)]);
        }
        if end > plen {
            dgram.extend_from_slice(&payload[offset.max(plen) - plen..end - plen]);
        }
        out.push(dgram);
        offset = end;
    }
    Ok(out)
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
