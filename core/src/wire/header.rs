//! The 24-byte ecaludp v5 datagram header (`ecaludp: src/protocol/header_v5.h`).

use super::WireError;

/// Magic bytes at offset 0 of every eCAL datagram.
pub const MAGIC: [u8; 4] = *b"ECAL";
/// The only header version eCAL 5.x and 6.x accept.
pub const VERSION: u8 = 5;
/// Size of the header in bytes.
pub const HEADER_LEN: usize = 24;
/// Largest UDP payload eCAL sends (64 KiB − 8 − 20 − 1).
pub const MAX_DATAGRAM_LEN: usize = 65_507;
/// Default bytes of message per datagram: `MAX_DATAGRAM_LEN − HEADER_LEN` = 65483.
pub const DEFAULT_MAX_FRAGMENT_PAYLOAD: usize = MAX_DATAGRAM_LEN - HEADER_LEN;

/// The `type` field of the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DatagramKind {
    /// 1: announces a fragmented message (`num` = fragment count, `len` = total length); no payload.
    FragmentInfo,
    /// 2: one fragment of a message (`num` = 0-based index, `len` = bytes in this datagram).
    Fragment,
    /// 3: a whole message in one datagram (`id` = −1, `num` = 1).
    Whole,
}

impl DatagramKind {
    /// The value written on the wire.
    pub fn to_u32(self) -> u32 {
        match self {
            DatagramKind::FragmentInfo => 1,
            DatagramKind::Fragment => 2,
            DatagramKind::Whole => 3,
        }
    }

    /// Parses the wire value; `None` for anything but 1, 2 and 3.
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(DatagramKind::FragmentInfo),
            2 => Some(DatagramKind::Fragment),
            3 => Some(DatagramKind::Whole),
            _ => None,
        }
    }
}

/// A decoded ecaludp v5 header (all integers little-endian on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DatagramHeader {
    /// Datagram type.
    pub kind: DatagramKind,
    /// −1 for whole messages, otherwise the id shared by the info datagram and all fragments.
    pub id: i32,
    /// 1 for whole messages; fragment count (info) or fragment index (fragment).
    pub num: u32,
    /// Payload bytes in this datagram; for an info datagram the total message length.
    pub len: u32,
}

impl DatagramHeader {
    /// Header of a non-fragmented datagram carrying `len` bytes.
    pub fn whole(len: u32) -> Self {
        DatagramHeader { kind: DatagramKind::Whole, id: -1, num: 1, len }
    }

    /// Parses and checks a datagram, returning the header and the payload it declares.
    ///
    /// Checks what eCAL checks: length ≥ 24, magic `ECAL`, version 5, a known type, and for
    /// types 2 and 3 that `len` fits in the bytes received (extra trailing bytes are ignored).
    /// The reserved bytes are not checked (eCAL does not either). Info datagrams return an
    /// empty payload.
    pub fn parse(datagram: &[u8]) -> Result<(DatagramHeader, &[u8]), WireError> {
        let Some((head, rest)) = datagram.split_first_chunk::<HEADER_LEN>() else {
            return Err(WireError::TooShort { len: datagram.len() });
        };
        let header = DatagramHeader::parse_head(head)?;
        let payload = match header.kind {
            DatagramKind::FragmentInfo => &rest[..0],
            DatagramKind::Fragment | DatagramKind::Whole => {
                let declared = header.len as usize;
                rest.get(..declared)
                    .ok_or(WireError::LengthExceedsDatagram { declared: header.len, available: rest.len() })?
            }
        };
        Ok((header, payload))
    }

    /// The header alone, from a datagram's first 24 bytes (magic, version and type checked; `len` is not checked
    /// against the bytes that follow, as [`Self::parse`] does).
    pub fn parse_head(head: &[u8; HEADER_LEN]) -> Result<DatagramHeader, WireError> {
        if head[0..4] != MAGIC {
            return Err(WireError::BadMagic);
        }
        if head[4] != VERSION {
            return Err(WireError::UnsupportedVersion(head[4]));
        }
        let word = |off: usize| u32::from_le_bytes([head[off], head[off + 1], head[off + 2], head[off + 3]]);
        let raw_kind = word(8);
        let kind = DatagramKind::from_u32(raw_kind).ok_or(WireError::UnknownType(raw_kind))?;
        Ok(DatagramHeader { kind, id: word(12) as i32, num: word(16), len: word(20) })
    }

    /// The 24 header bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[8..12].copy_from_slice(&self.kind.to_u32().to_le_bytes());
        out[12..16].copy_from_slice(&self.id.to_le_bytes());
        out[16..20].copy_from_slice(&self.num.to_le_bytes());
        out[20..24].copy_from_slice(&self.len.to_le_bytes());
        out
    }
}
