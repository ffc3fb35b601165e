//! shoal's packed UDP data datagram: several small samples of one publisher in one datagram. Sent only to
//! subscribers that announced they read it (see `transport/udp`); never to eCAL.
//!
//! Layout (integers little-endian):
//!
//! ```text
//! 0   4  magic "SHPK"   (eCAL's datagrams start with "ECAL", shoal's auth envelope with "SHOA": an eCAL receiver
//!                        drops this as a bad header, shoal tells the three apart by their first four bytes)
//! 4   1  version 1      (a receiver refuses any other; a new layout gets a new version, announced anew)
//! 5   1  flags 0        (reserved; a receiver refuses a datagram with any flag set)
//! 6   2  count          (records that follow, 1..=MAX_RECORDS)
//! 8   8  publisher id   (eCAL's topic id of the publisher)
//! 16  2  name length    (1..=MAX_NAME_LEN bytes of UTF-8 topic name, no NUL)
//! 18  n  topic name
//!     then `count` records, back to back, exactly filling the datagram:
//!     8  clock          (the publisher's send counter, as in eCAL's `content.clock`)
//!     8  send time      (µs since the UNIX epoch, as in `content.time`; signed)
//!     4  payload length
//!     …  payload
//! ```
//!
//! What eCAL's data sample carries beyond this is implied: the content hash is `id ^ (clock << 1)`, the host name is
//! not used by a receiver. The decoder ([`PackedDatagram::parse`]) checks the whole datagram before it hands out
//! a record (the declared count matches the records, no byte left over), never allocates and never panics.

/// The first four bytes of a packed datagram.
pub const PACK_MAGIC: [u8; 4] = *b"SHPK";
/// The layout version this code writes and reads.
pub const PACK_VERSION: u8 = 1;
/// Bytes before the topic name.
pub const PACK_HEADER_LEN: usize = 18;
/// Bytes of a record before its payload.
pub const RECORD_HEADER_LEN: usize = 20;
/// Records one datagram carries at most.
pub const MAX_RECORDS: usize = 4096;
/// Longest topic name a packed datagram carries (longer names are sent in eCAL's format).
pub const MAX_NAME_LEN: usize = 1024;

/// Why bytes are not a valid packed datagram.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    /// Shorter than the fixed header.
    #[error("packed datagram of {len} bytes is shorter than its {PACK_HEADER_LEN}-byte header")]
    TooShort {
        /// Bytes received.
        len: usize,
    },
    /// The first four bytes are not `SHPK`.
    #[error("not a packed datagram (bad magic)")]
    BadMagic,
    /// Another layout version.
    #[error("unsupported packed datagram version {0}")]
    UnsupportedVersion(u8),
    /// A reserved flag is set.
    #[error("packed datagram flags {0:#04x} set (none is defined)")]
    BadFlags(u8),
    /// A count of 0 or above [`MAX_RECORDS`].
    #[error("packed datagram declares {0} records (1..={MAX_RECORDS})")]
    BadCount(u16),
    /// A name length of 0, above [`MAX_NAME_LEN`], or past the end.
    #[error("packed datagram name of {declared} bytes (1..={MAX_NAME_LEN}, {available} available)")]
    BadName {
        /// Declared length.
        declared: usize,
        /// Bytes after the header.
        available: usize,
    },
    /// The topic name is not UTF-8.
    #[error("packed datagram topic name is not valid UTF-8")]
    NameNotUtf8,
    /// Record `index` does not fit in what is left of the datagram.
    #[error("packed record {index} truncated: needs {needed} bytes, {available} left")]
    RecordTruncated {
        /// 0-based record index.
        index: usize,
        /// Bytes the record needs (header, or header and payload).
        needed: u64,
        /// Bytes left.
        available: usize,
    },
    /// Bytes after the last declared record.
    #[error("{0} bytes after the last packed record")]
    TrailingBytes(usize),
}

/// One sample of a packed datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedRecord<'a> {
    /// The publisher's send counter.
    pub clock: u64,
    /// Send time, µs since the UNIX epoch.
    pub time_us: i64,
    /// The message.
    pub payload: &'a [u8],
}

/// A checked packed datagram: its header fields and its records (iterate with [`PackedDatagram::records`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedDatagram<'a> {
    /// The publisher's entity id.
    pub publisher_id: u64,
    /// The topic name.
    pub topic: &'a str,
    count: usize,
    records: &'a [u8],
}

/// Whether a datagram is a packed one (by its magic; [`PackedDatagram::parse`] checks the rest).
pub fn is_packed(datagram: &[u8]) -> bool {
    datagram.starts_with(&PACK_MAGIC)
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn split_record(rest: &[u8], index: usize) -> Result<(PackedRecord<'_>, &[u8]), PackError> {
    let Some((head, tail)) = rest.split_first_chunk::<RECORD_HEADER_LEN>() else {
        return Err(PackError::RecordTruncated { index, needed: RECORD_HEADER_LEN as u64, available: rest.len() });
    };
    let mut clock = [0u8; 8];
    clock.copy_from_slice(&head[0..8]);
    let mut time = [0u8; 8];
    time.copy_from_slice(&head[8..16]);
    let len = u32::from_le_bytes([head[16], head[17], head[18], head[19]]) as usize;
    let Some((payload, tail)) = tail.split_at_checked(len) else {
        return Err(PackError::RecordTruncated {
            index,
            needed: (RECORD_HEADER_LEN + len) as u64,
            available: rest.len(),
        });
    };
    Ok((PackedRecord { clock: u64::from_le_bytes(clock), time_us: i64::from_le_bytes(time), payload }, tail))
}

impl<'a> PackedDatagram<'a> {
    /// Parses and checks a whole packed datagram.
    pub fn parse(datagram: &'a [u8]) -> Result<PackedDatagram<'a>, PackError> {
        if datagram.len() < PACK_HEADER_LEN {
            return Err(PackError::TooShort { len: datagram.len() });
        }
        if datagram[0..4] != PACK_MAGIC {
            return Err(PackError::BadMagic);
        }
        if datagram[4] != PACK_VERSION {
            return Err(PackError::UnsupportedVersion(datagram[4]));
        }
        if datagram[5] != 0 {
            return Err(PackError::BadFlags(datagram[5]));
        }
        let raw_count = u16_at(datagram, 6);
        let count = usize::from(raw_count);
        if count == 0 || count > MAX_RECORDS {
            return Err(PackError::BadCount(raw_count));
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&datagram[8..16]);
        let name_len = usize::from(u16_at(datagram, 16));
        let after = &datagram[PACK_HEADER_LEN..];
        let Some((name, records)) = after.split_at_checked(name_len).filter(|_| (1..=MAX_NAME_LEN).contains(&name_len))
        else {
            return Err(PackError::BadName { declared: name_len, available: after.len() });
        };
        let topic = std::str::from_utf8(name).map_err(|_| PackError::NameNotUtf8)?;
        let mut rest = records;
        for index in 0..count {
            rest = split_record(rest, index)?.1;
        }
        if !rest.is_empty() {
            return Err(PackError::TrailingBytes(rest.len()));
        }
        Ok(PackedDatagram { publisher_id: u64::from_le_bytes(id), topic, count, records })
    }

    /// Records in the datagram (at least 1).
    pub fn count(&self) -> usize {
        self.count
    }

    /// The records, in the order the publisher sent them.
    pub fn records(&self) -> impl Iterator<Item = PackedRecord<'a>> + 'a {
        let mut rest = self.records;
        let count = self.count;
        (0..count).map_while(move |index| {
            // `parse` checked every record; this cannot fail.
            let (r, tail) = split_record(rest, index).ok()?;
            rest = tail;
            Some(r)
        })
    }
}

/// Bytes of the header and name of a packed datagram for `topic`.
pub fn packed_header_len(topic: &str) -> usize {
    PACK_HEADER_LEN + topic.len()
}

/// Bytes a record of `payload_len` bytes adds to a packed datagram.
pub fn record_len(payload_len: usize) -> usize {
    RECORD_HEADER_LEN + payload_len
}

/// Whether `topic` can be carried in a packed datagram (its name is 1..=[`MAX_NAME_LEN`] bytes).
pub fn packable_topic(topic: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&topic.len())
}

/// Writes the header of a packed datagram with one record into an empty `buf` and appends that record; `None`
/// when the topic name cannot be packed or the payload is longer than `u32::MAX` bytes. More records are added
/// with [`append_record`].
pub fn begin_packed(
    buf: &mut Vec<u8>,
    publisher_id: u64,
    topic: &str,
    clock: u64,
    time_us: i64,
    payload: &[u8],
) -> Option<()> {
    if !packable_topic(topic) {
        return None;
    }
    let len = u32::try_from(payload.len()).ok()?;
    buf.clear();
    buf.reserve(packed_header_len(topic) + record_len(payload.len()));
    buf.extend_from_slice(&PACK_MAGIC);
    buf.push(PACK_VERSION);
    buf.push(0);
    buf.extend_from_slice(&1u16.to_le_bytes());
    buf.extend_from_slice(&publisher_id.to_le_bytes());
    buf.extend_from_slice(&(topic.len() as u16).to_le_bytes());
    buf.extend_from_slice(topic.as_bytes());
    buf.extend_from_slice(&clock.to_le_bytes());
    buf.extend_from_slice(&time_us.to_le_bytes());
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(payload);
    Some(())
}

/// The records of a packed datagram `begin_packed` wrote (everything after its header and name).
pub fn records_of(datagram: &[u8]) -> &[u8] {
    let name_len = if datagram.len() >= PACK_HEADER_LEN { usize::from(u16_at(datagram, 16)) } else { 0 };
    datagram.get(PACK_HEADER_LEN + name_len..).unwrap_or(&[])
}

/// Records of a packed datagram this process wrote (the header's count).
pub fn count_of(datagram: &[u8]) -> usize {
    if datagram.len() >= PACK_HEADER_LEN { usize::from(u16_at(datagram, 6)) } else { 0 }
}

/// Appends `records` (`n` whole records, as [`records_of`] gives them) to the packed datagram `buf` of the same
/// publisher and topic; false (nothing changed) when the count would pass [`MAX_RECORDS`].
pub fn append_records(buf: &mut Vec<u8>, records: &[u8], n: usize) -> bool {
    let count = count_of(buf);
    if count == 0 || count + n > MAX_RECORDS {
        return false;
    }
    buf.extend_from_slice(records);
    buf[6..8].copy_from_slice(&((count + n) as u16).to_le_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(id: u64, topic: &str, records: &[(u64, i64, &[u8])]) -> Vec<u8> {
        let mut buf = Vec::new();
        let (c, t, p) = records[0];
        begin_packed(&mut buf, id, topic, c, t, p).expect("packable");
        for &(c, t, p) in &records[1..] {
            let mut one = Vec::new();
            begin_packed(&mut one, id, topic, c, t, p).expect("packable");
            assert!(append_records(&mut buf, records_of(&one), count_of(&one)));
        }
        buf
    }

    #[test]
    fn round_trip_keeps_every_field_and_the_order() {
        let big = vec![0xabu8; 1000];
        let recs: [(u64, i64, &[u8]); 4] =
            [(1, -5, b""), (2, i64::MAX, b"x"), (u64::MAX, i64::MIN, &big), (7, 0, b"z")];
        let d = packed(u64::MAX - 3, "topic/ü", &recs);
        assert!(is_packed(&d));
        assert_eq!(d.len(), packed_header_len("topic/ü") + recs.iter().map(|r| record_len(r.2.len())).sum::<usize>());
        let p = PackedDatagram::parse(&d).expect("valid");
        assert_eq!((p.publisher_id, p.topic, p.count()), (u64::MAX - 3, "topic/ü", 4));
        let got: Vec<(u64, i64, Vec<u8>)> = p.records().map(|r| (r.clock, r.time_us, r.payload.to_vec())).collect();
        let want: Vec<(u64, i64, Vec<u8>)> = recs.iter().map(|r| (r.0, r.1, r.2.to_vec())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn every_truncation_and_every_extension_is_refused() {
        let d = packed(9, "t", &[(1, 1, b"abc"), (2, 2, b"defgh")]);
        for n in 0..d.len() {
            assert!(PackedDatagram::parse(&d[..n]).is_err(), "{n} of {} bytes accepted", d.len());
        }
        let mut longer = d.clone();
        longer.push(0);
        assert_eq!(PackedDatagram::parse(&longer), Err(PackError::TrailingBytes(1)));
    }

    #[test]
    fn bad_headers_get_their_error() {
        let d = packed(9, "t", &[(1, 1, b"abc")]);
        let with = |i: usize, v: &[u8]| {
            let mut x = d.clone();
            x[i..i + v.len()].copy_from_slice(v);
            PackedDatagram::parse(&x).map(|p| p.count())
        };
        assert_eq!(PackedDatagram::parse(&d[..5]), Err(PackError::TooShort { len: 5 }));
        assert_eq!(with(0, b"ECAL"), Err(PackError::BadMagic));
        assert_eq!(with(4, &[2]), Err(PackError::UnsupportedVersion(2)));
        assert_eq!(with(5, &[1]), Err(PackError::BadFlags(1)));
        assert_eq!(with(6, &0u16.to_le_bytes()), Err(PackError::BadCount(0)));
        assert_eq!(with(6, &u16::MAX.to_le_bytes()), Err(PackError::BadCount(u16::MAX)));
        // Two records declared, one present.
        assert!(matches!(with(6, &2u16.to_le_bytes()), Err(PackError::RecordTruncated { index: 1, .. })));
        assert!(matches!(with(16, &0u16.to_le_bytes()), Err(PackError::BadName { declared: 0, .. })));
        assert!(matches!(with(16, &5000u16.to_le_bytes()), Err(PackError::BadName { declared: 5000, .. })));
        assert_eq!(with(18, &[0xff]), Err(PackError::NameNotUtf8));
        // A payload length far beyond the datagram (and beyond usize on 32 bits) is refused, not trusted.
        assert!(matches!(
            with(19 + 16, &u32::MAX.to_le_bytes()),
            Err(PackError::RecordTruncated { index: 0, needed, .. }) if needed == u64::from(u32::MAX) + 20
        ));
        // An eCAL datagram is not a packed one.
        assert!(!is_packed(b"ECAL\x05\0\0\0"));
    }

    #[test]
    fn appending_stops_at_the_record_bound() {
        let mut d = packed(1, "t", &[(1, 1, b"")]);
        let mut one = Vec::new();
        begin_packed(&mut one, 1, "t", 2, 2, b"").expect("packable");
        for _ in 1..MAX_RECORDS {
            assert!(append_records(&mut d, records_of(&one), 1));
        }
        assert!(!append_records(&mut d, records_of(&one), 1), "count would pass MAX_RECORDS");
        assert_eq!(PackedDatagram::parse(&d).map(|p| p.count()), Ok(MAX_RECORDS));
        assert!(begin_packed(&mut Vec::new(), 1, "", 1, 1, b"").is_none(), "an empty name cannot be packed");
        assert!(begin_packed(&mut Vec::new(), 1, &"n".repeat(MAX_NAME_LEN + 1), 1, 1, b"").is_none());
    }
}
