//! Reading MCAP files as `shoal play` and `shoal info` do: from the start to the end, one record at a time, with
//! every allocation that the file's contents decide bounded by [`Limits`].
//!
//! Why not the `mcap` crate's readers (0.26): its `SummaryReader` keeps the whole summary section (every schema,
//! channel and index) in memory; its chunk reader has no limit on the length of the records inside a chunk and
//! reserves what a record's length field says before the bytes are there; its record parsers reserve what a string
//! field's length says (up to 4 GiB) before checking that the record holds that much. So the framing, the chunks and
//! the records shoal needs (schema, channel, message, metadata, statistics, footer) are read here, from the MCAP
//! specification, with lengths checked against the bytes present before anything is allocated; the `mcap` crate
//! still writes the files (`shoal record`).
//!
//! What the limits bound, and what happens beyond them:
//! - [`Limits::max_record`]: the largest record read (one message, schema, metadata record; a chunk compressed and
//!   uncompressed). A larger record, or a chunk that declares a larger uncompressed size, is skipped and reported;
//!   a compressed chunk that decompresses to more than it declares is damaged (skipped, reported) and decompression
//!   stops at the declared size. Reading holds at most one record and one decompressed chunk: about twice this.
//! - [`Limits::max_channels`] and [`Limits::max_catalog_bytes`]: the channels kept, and the memory for the schemas
//!   and channel definitions kept ([`Catalog`]). Channels beyond them, and channels whose schema was beyond the byte
//!   budget, are not kept: their messages are counted as skipped.
//! - [`Limits::max_metadata_bytes`]: metadata records kept by `shoal info`; the ones beyond are counted.
//! - [`MAX_DAMAGE_LISTED`]: damaged parts described; beyond that they are only counted.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};

/// The magic bytes at the start and the end of an MCAP file.
pub const MAGIC: &[u8; 8] = b"\x89MCAP0\r\n";

/// Record opcodes (MCAP specification).
pub mod op {
    /// Header.
    pub const HEADER: u8 = 0x01;
    /// Footer (the last record; the end magic follows).
    pub const FOOTER: u8 = 0x02;
    /// Schema.
    pub const SCHEMA: u8 = 0x03;
    /// Channel.
    pub const CHANNEL: u8 = 0x04;
    /// Message.
    pub const MESSAGE: u8 = 0x05;
    /// Chunk (schemas, channels and messages, compressed or not).
    pub const CHUNK: u8 = 0x06;
    /// Statistics (summary section).
    pub const STATISTICS: u8 = 0x0B;
    /// Metadata.
    pub const METADATA: u8 = 0x0C;
}

/// Opcode and length in front of every record.
const RECORD_HEADER: u64 = 9;
/// The footer record (opcode, length, summary start, summary offset start, CRC) and the end magic.
const FOOTER_AND_MAGIC: u64 = RECORD_HEADER + 20 + 8;
/// Bytes charged per kept map entry, string and catalog entry for the heap around the bytes themselves.
const ENTRY_OVERHEAD: usize = 64;
/// Damaged parts described in a [`Damages`]; further ones are only counted.
pub const MAX_DAMAGE_LISTED: usize = 100;

/// The bounds of reading one file (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The largest record read, bytes (a chunk: compressed, and its declared uncompressed size).
    pub max_record: u64,
    /// Channels kept.
    pub max_channels: usize,
    /// Memory for the schemas and channel definitions kept, bytes.
    pub max_catalog_bytes: usize,
    /// Memory for the metadata records kept (`shoal info`), bytes.
    pub max_metadata_bytes: usize,
}

impl Limits {
    /// Default of [`Limits::max_record`] in MiB (`--max-record-mb`).
    pub const DEFAULT_MAX_RECORD_MB: u64 = 256;
    /// Default of [`Limits::max_catalog_bytes`] in MiB (`--max-schema-mb`).
    pub const DEFAULT_MAX_SCHEMA_MB: u64 = 64;
    /// [`Limits::max_metadata_bytes`] of `shoal info`.
    pub const MAX_METADATA_BYTES: usize = 16 << 20;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_record: Limits::DEFAULT_MAX_RECORD_MB << 20,
            max_channels: 65_536,
            max_catalog_bytes: (Limits::DEFAULT_MAX_SCHEMA_MB << 20) as usize,
            max_metadata_bytes: Limits::MAX_METADATA_BYTES,
        }
    }
}

/// Why a record does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A field runs past the end of the record.
    #[error("its {0} field runs past the end of the record")]
    Short(&'static str),
    /// A string field is not UTF-8.
    #[error("its {0} field is not UTF-8")]
    NotUtf8(&'static str),
}

/// A `map<string, string>` of a record, checked when the record was parsed; read with [`StrMap::iter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrMap<'a>(&'a [u8]);

impl<'a> StrMap<'a> {
    fn parse(c: &mut Cur<'a>, field: &'static str) -> Result<StrMap<'a>, ParseError> {
        let len = c.u32(field)? as usize;
        let bytes = c.take(len, field)?;
        let mut inner = Cur(bytes);
        while !inner.0.is_empty() {
            inner.str(field)?;
            inner.str(field)?;
        }
        Ok(StrMap(bytes))
    }

    /// The entries, in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let mut c = Cur(self.0);
        std::iter::from_fn(move || {
            if c.0.is_empty() {
                return None;
            }
            Some((c.str("map").ok()?, c.str("map").ok()?))
        })
    }

    /// Bytes of the map in the record.
    pub fn byte_len(&self) -> usize {
        self.0.len()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The `channel_message_counts` of a statistics record (`map<uint16, uint64>`), checked when it was parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountMap<'a>(&'a [u8]);

impl<'a> CountMap<'a> {
    /// The (channel id, message count) entries, in file order.
    pub fn iter(&self) -> impl Iterator<Item = (u16, u64)> + 'a {
        self.0
            .chunks_exact(10)
            .map(|e| (u16::from_le_bytes([e[0], e[1]]), u64::from_le_bytes(e[2..10].try_into().unwrap_or_default())))
    }
}

/// A record as `shoal play` and `shoal info` use it, borrowing from the bytes it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rec<'a> {
    /// A schema.
    Schema {
        /// Id (not 0).
        id: u16,
        /// Schema name (a type name).
        name: &'a str,
        /// Schema encoding (`protobuf`, ...).
        encoding: &'a str,
        /// The schema.
        data: &'a [u8],
    },
    /// A channel.
    Channel {
        /// Id.
        id: u16,
        /// Its schema's id (0: none).
        schema_id: u16,
        /// Topic name.
        topic: &'a str,
        /// Message encoding.
        message_encoding: &'a str,
        /// Metadata.
        metadata: StrMap<'a>,
    },
    /// A message.
    Message {
        /// Its channel.
        channel_id: u16,
        /// Sequence number.
        sequence: u32,
        /// Time it was logged, ns.
        log_time: u64,
        /// Time it was published, ns.
        publish_time: u64,
        /// The payload.
        data: &'a [u8],
    },
    /// A metadata record.
    Metadata {
        /// Its name.
        name: &'a str,
        /// Its entries.
        metadata: StrMap<'a>,
    },
    /// The statistics of the summary section.
    Statistics {
        /// Messages in the file.
        message_count: u64,
        /// Earliest log time, ns.
        message_start_time: u64,
        /// Latest log time, ns.
        message_end_time: u64,
        /// Messages per channel.
        channel_message_counts: CountMap<'a>,
    },
    /// Any other record (header, indexes, attachments, data end, ...): not used.
    Other {
        /// Its opcode.
        opcode: u8,
    },
}

/// A cursor over a record's bytes.
struct Cur<'a>(&'a [u8]);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], ParseError> {
        if n > self.0.len() {
            return Err(ParseError::Short(field));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ParseError> {
        let b = self.take(N, field)?;
        let mut out = [0; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, ParseError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, ParseError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, ParseError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn str(&mut self, field: &'static str) -> Result<&'a str, ParseError> {
        let len = self.u32(field)? as usize;
        std::str::from_utf8(self.take(len, field)?).map_err(|_| ParseError::NotUtf8(field))
    }

    fn bytes32(&mut self, field: &'static str) -> Result<&'a [u8], ParseError> {
        let len = self.u32(field)? as usize;
        self.take(len, field)
    }

    fn bytes64(&mut self, field: &'static str) -> Result<&'a [u8], ParseError> {
        let len = usize::try_from(self.u64(field)?).map_err(|_| ParseError::Short(field))?;
        self.take(len, field)
    }
}

/// Parses the body of a record with `opcode` (not a chunk: see [`read_records`]).
pub fn parse(opcode: u8, body: &[u8]) -> Result<Rec<'_>, ParseError> {
    let mut c = Cur(body);
    Ok(match opcode {
        op::SCHEMA => Rec::Schema {
            id: c.u16("id")?,
            name: c.str("name")?,
            encoding: c.str("encoding")?,
            data: c.bytes32("data")?,
        },
        op::CHANNEL => Rec::Channel {
            id: c.u16("id")?,
            schema_id: c.u16("schema_id")?,
            topic: c.str("topic")?,
            message_encoding: c.str("message_encoding")?,
            metadata: StrMap::parse(&mut c, "metadata")?,
        },
        op::MESSAGE => Rec::Message {
            channel_id: c.u16("channel_id")?,
            sequence: c.u32("sequence")?,
            log_time: c.u64("log_time")?,
            publish_time: c.u64("publish_time")?,
            data: c.0,
        },
        op::METADATA => Rec::Metadata { name: c.str("name")?, metadata: StrMap::parse(&mut c, "metadata")? },
        op::STATISTICS => {
            let message_count = c.u64("message_count")?;
            c.take(2 + 4 + 4 + 4 + 4, "counts")?;
            let message_start_time = c.u64("message_start_time")?;
            let message_end_time = c.u64("message_end_time")?;
            let len = c.u32("channel_message_counts")? as usize;
            let counts = c.take(len, "channel_message_counts")?;
            if !counts.len().is_multiple_of(10) {
                return Err(ParseError::Short("channel_message_counts"));
            }
            Rec::Statistics {
                message_count,
                message_start_time,
                message_end_time,
                channel_message_counts: CountMap(counts),
            }
        }
        opcode => Rec::Other { opcode },
    })
}

/// The header fields of a chunk record and its `records` field (compressed or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader<'a> {
    /// Earliest log time of its messages.
    pub message_start_time: u64,
    /// Latest log time of its messages.
    pub message_end_time: u64,
    /// Size of the records uncompressed, as declared.
    pub uncompressed_size: u64,
    /// CRC-32 of the records uncompressed (0: none).
    pub uncompressed_crc: u32,
    /// `zstd`, `lz4` or empty (not compressed).
    pub compression: &'a str,
    /// The records, as stored.
    pub records: &'a [u8],
}

impl<'a> ChunkHeader<'a> {
    /// Parses a chunk record's body.
    pub fn parse(body: &'a [u8]) -> Result<ChunkHeader<'a>, ParseError> {
        let mut c = Cur(body);
        Ok(ChunkHeader {
            message_start_time: c.u64("message_start_time")?,
            message_end_time: c.u64("message_end_time")?,
            uncompressed_size: c.u64("uncompressed_size")?,
            uncompressed_crc: c.u32("uncompressed_crc")?,
            compression: c.str("compression")?,
            records: c.bytes64("records")?,
        })
    }
}

/// Why a chunk is skipped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// The chunk header does not parse.
    #[error("its header does not parse: {0}")]
    Header(ParseError),
    /// The declared uncompressed size is above [`Limits::max_record`].
    #[error("it declares {declared} uncompressed bytes, above the limit of {limit} (--max-record-mb)")]
    TooLarge {
        /// Declared uncompressed size.
        declared: u64,
        /// The limit.
        limit: u64,
    },
    /// An uncompressed chunk whose sizes disagree.
    #[error("it is not compressed, but declares {declared} uncompressed bytes and holds {held}")]
    SizeMismatch {
        /// Declared uncompressed size.
        declared: u64,
        /// Bytes held.
        held: u64,
    },
    /// A compression this reader does not know.
    #[error("its compression `{0}` is not supported (zstd, lz4 or none)")]
    Unsupported(String),
    /// Decompression failed.
    #[error("it does not decompress: {0}")]
    Decompress(String),
    /// Decompression would give more bytes than declared (stopped there).
    #[error("it decompresses to more than the {declared} bytes it declares (stopped there)")]
    Larger {
        /// Declared uncompressed size.
        declared: u64,
    },
    /// Decompression gave fewer bytes than declared.
    #[error("it decompresses to {got} bytes, not the {declared} it declares")]
    Smaller {
        /// Declared uncompressed size.
        declared: u64,
        /// Bytes decompressed.
        got: u64,
    },
    /// The CRC of the uncompressed records differs.
    #[error("its CRC is {calculated:#010x}, not the {saved:#010x} it declares")]
    Crc {
        /// Declared.
        saved: u32,
        /// Computed.
        calculated: u32,
    },
    /// A record inside breaks the framing.
    #[error("a record inside runs past its end")]
    Framing,
    /// A record inside does not parse.
    #[error("a record inside (opcode {opcode:#04x}) does not parse: {error}")]
    Record {
        /// The record's opcode.
        opcode: u8,
        /// Why.
        error: ParseError,
    },
}

/// The uncompressed records of a chunk: borrowed when it is not compressed. Never more than `limit` bytes: a chunk
/// declaring more is refused before anything is allocated, and decompression stops at the declared size.
pub fn decompress<'a>(h: &ChunkHeader<'a>, limit: u64) -> Result<Cow<'a, [u8]>, ChunkError> {
    if h.uncompressed_size > limit {
        return Err(ChunkError::TooLarge { declared: h.uncompressed_size, limit });
    }
    let declared = h.uncompressed_size;
    // At most `limit` (a usize on 64-bit Linux, checked above against a u64 limit the caller chose).
    let size = usize::try_from(declared).map_err(|_| ChunkError::TooLarge { declared, limit })?;
    let out: Cow<'a, [u8]> = match h.compression {
        "" => {
            if h.records.len() as u64 != declared {
                return Err(ChunkError::SizeMismatch { declared, held: h.records.len() as u64 });
            }
            Cow::Borrowed(h.records)
        }
        "zstd" => {
            // Decompressed in one call into a buffer of exactly the declared size: zstd refuses ("destination
            // buffer is too small") rather than writing more. The pages are touched only as they are written.
            let mut out = Vec::with_capacity(size);
            let mut d = zstd::bulk::Decompressor::new().map_err(|e| ChunkError::Decompress(e.to_string()))?;
            match d.decompress_to_buffer(h.records, &mut out) {
                Ok(_) => {}
                Err(e) if e.to_string().contains("too small") => return Err(ChunkError::Larger { declared }),
                Err(e) => return Err(ChunkError::Decompress(e.to_string())),
            }
            Cow::Owned(out)
        }
        "lz4" => {
            let mut out = vec![0u8; size];
            let mut d = lz4::Decoder::new(h.records).map_err(|e| ChunkError::Decompress(e.to_string()))?;
            let mut got = 0;
            while got < size {
                match d.read(&mut out[got..]) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(ChunkError::Decompress(e.to_string())),
                }
            }
            out.truncate(got);
            let mut one = [0u8; 1];
            if got == size && d.read(&mut one).map_err(|e| ChunkError::Decompress(e.to_string()))? > 0 {
                return Err(ChunkError::Larger { declared });
            }
            Cow::Owned(out)
        }
        other => return Err(ChunkError::Unsupported(short(other))),
    };
    if out.len() as u64 != declared {
        return Err(ChunkError::Smaller { declared, got: out.len() as u64 });
    }
    if h.uncompressed_crc != 0 {
        let calculated = crc32fast::hash(&out);
        if calculated != h.uncompressed_crc {
            return Err(ChunkError::Crc { saved: h.uncompressed_crc, calculated });
        }
    }
    Ok(out)
}

/// The schema, channel and message records of a chunk's uncompressed `records` (other records, which a chunk may
/// not hold, are left out), each given to `f` until it returns false; returns false when `f` did. Checks the whole
/// chunk before the first call: nothing of a damaged chunk is given.
pub fn chunk_records<'a>(records: &'a [u8], mut f: impl FnMut(Rec<'a>) -> bool) -> Result<bool, ChunkError> {
    fn each<'a>(mut rest: &'a [u8], f: &mut dyn FnMut(Rec<'a>) -> bool) -> Result<bool, ChunkError> {
        while !rest.is_empty() {
            let mut c = Cur(rest);
            let opcode = c.array::<1>("opcode").map_err(|_| ChunkError::Framing)?[0];
            let body = c.bytes64("record").map_err(|_| ChunkError::Framing)?;
            rest = c.0;
            if !matches!(opcode, op::SCHEMA | op::CHANNEL | op::MESSAGE) {
                continue;
            }
            let rec = parse(opcode, body).map_err(|error| ChunkError::Record { opcode, error })?;
            if !f(rec) {
                return Ok(false);
            }
        }
        Ok(true)
    }
    each(records, &mut |_| true)?;
    each(records, &mut f)
}

/// A part of a file that could not be read or was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The reader had read this many bytes of the file when it found the damage (the damage is before).
    pub read_bytes: u64,
    /// What is wrong, and what was skipped.
    pub what: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (found after reading {} bytes)", self.what, self.read_bytes)
    }
}

/// The damaged or skipped parts of a file: the first [`MAX_DAMAGE_LISTED`] described, the rest counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Damages {
    /// The first ones.
    pub list: Vec<Damage>,
    /// How many more there were.
    pub unlisted: u64,
}

impl Damages {
    fn push(&mut self, read_bytes: u64, what: String) {
        if self.list.len() < MAX_DAMAGE_LISTED {
            self.list.push(Damage { read_bytes, what });
        } else {
            self.unlisted = self.unlisted.saturating_add(1);
        }
    }

    /// True when nothing was damaged or skipped.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Reads `n` bytes at the current position into `buf` (replacing its contents); false when the file ends first.
/// `buf` keeps its allocation for the next record unless this one was much smaller than it.
fn read_into(file: &mut impl Read, buf: &mut Vec<u8>, n: usize) -> std::io::Result<bool> {
    if buf.capacity() > (16 << 20) && buf.capacity() / 4 > n {
        *buf = Vec::new();
    }
    buf.clear();
    let got = file.take(n as u64).read_to_end(buf)?;
    Ok(got == n)
}

/// The first 32 characters of a string from a file, for a message.
fn short(s: &str) -> String {
    s.chars().take(32).collect()
}

fn name_of(opcode: u8) -> &'static str {
    match opcode {
        op::HEADER => "header",
        op::FOOTER => "footer",
        op::SCHEMA => "schema",
        op::CHANNEL => "channel",
        op::MESSAGE => "message",
        op::CHUNK => "chunk",
        0x07 => "message index",
        0x08 => "chunk index",
        0x09 => "attachment",
        0x0A => "attachment index",
        op::STATISTICS => "statistics",
        op::METADATA => "metadata",
        0x0D => "metadata index",
        0x0E => "summary offset",
        0x0F => "data end",
        _ => "unknown",
    }
}

/// Reads the MCAP file `file` from start to end and gives each record to `on_record` (which returns false to stop):
/// the records of intact chunks included (their schemas, channels and messages), the records of the summary section
/// too. Returns what could not be read or was skipped; errors only when the file cannot be read.
///
/// A record above [`Limits::max_record`] is skipped (reported) and reading goes on after it; so is a chunk that is
/// damaged or declares more than the limit uncompressed (nothing of it is given). A record whose length runs past
/// the end of the file ends the reading (a truncated file), as does a file without the MCAP magic.
pub fn read_records<R: Read + Seek>(
    mut file: R,
    limits: &Limits,
    mut on_record: impl FnMut(Rec<'_>) -> bool,
) -> std::io::Result<Damages> {
    let len = file.seek(SeekFrom::End(0))?;
    file.seek(SeekFrom::Start(0))?;
    let mut damage = Damages::default();
    let mut magic = [0u8; 8];
    if len < 8 || file.read_exact(&mut magic).is_err() || &magic != MAGIC {
        damage.push(0, "not an MCAP file: it does not start with the MCAP magic bytes; nothing was read".into());
        return Ok(damage);
    }
    let truncated = "the file ends inside a record or without its footer (truncated, or the recording was killed); \
                     everything before was read";
    let mut pos = 8u64;
    let mut buf = Vec::new();
    loop {
        let mut head = [0u8; RECORD_HEADER as usize];
        if len - pos < RECORD_HEADER || file.read_exact(&mut head).is_err() {
            damage.push(pos, truncated.into());
            break;
        }
        pos += RECORD_HEADER;
        let opcode = head[0];
        let rec_len = u64::from_le_bytes(head[1..].try_into().unwrap_or_default());
        if rec_len > len - pos {
            damage.push(pos, truncated.into());
            break;
        }
        if rec_len > limits.max_record {
            file.seek(SeekFrom::Current(rec_len as i64))?;
            pos += rec_len;
            damage.push(
                pos,
                format!(
                    "a {} record of {rec_len} bytes is above the limit of {} bytes (--max-record-mb); skipped",
                    name_of(opcode),
                    limits.max_record
                ),
            );
            continue;
        }
        // Below max_record, which the caller chose in bytes that fit memory.
        let n = rec_len as usize;
        if !read_into(&mut file, &mut buf, n)? {
            damage.push(pos, truncated.into());
            break;
        }
        pos += rec_len;
        match opcode {
            op::FOOTER => {
                let mut end = [0u8; 8];
                if file.read_exact(&mut end).is_err() || &end != MAGIC {
                    damage.push(pos, "the footer is not followed by the MCAP magic bytes".into());
                }
                break;
            }
            op::CHUNK => {
                let chunk = ChunkHeader::parse(&buf).map_err(ChunkError::Header).and_then(|h| {
                    let records = decompress(&h, limits.max_record)?;
                    chunk_records(&records, &mut on_record).map(|go_on| (h, go_on))
                });
                match chunk {
                    Ok((_, true)) => {}
                    Ok((_, false)) => return Ok(damage),
                    Err(e) => {
                        let h = ChunkHeader::parse(&buf).ok();
                        let place = h.map_or_else(String::new, |h| {
                            format!(
                                " ({} stored bytes, {} compression, log times {}..{})",
                                h.records.len(),
                                if h.compression.is_empty() { "no".to_string() } else { short(h.compression) },
                                h.message_start_time,
                                h.message_end_time
                            )
                        });
                        damage.push(pos, format!("a chunk{place} is skipped: {e}; its messages are not read"));
                    }
                }
            }
            _ => match parse(opcode, &buf) {
                Ok(r) => {
                    if !on_record(r) {
                        return Ok(damage);
                    }
                }
                Err(e) => damage.push(pos, format!("a {} record does not parse: {e}; skipped", name_of(opcode))),
            },
        }
    }
    Ok(damage)
}

/// Why a file's summary section is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummaryError {
    /// No footer at the end (a truncated file).
    #[error("the file does not end with a footer and the MCAP magic")]
    NoFooter,
    /// The summary start points outside the file.
    #[error("the footer's summary start {0} is outside the file")]
    BadStart(u64),
    /// The records of the summary section do not frame up to the footer.
    #[error("its records run past the footer")]
    Framing,
    /// A record above the limit.
    #[error("a record of {0} bytes is above --max-record-mb")]
    TooLarge(u64),
    /// A record does not parse.
    #[error("a {0} record does not parse: {1}")]
    Parse(&'static str, ParseError),
    /// The CRC differs.
    #[error("its CRC is {calculated:#010x}, not the {saved:#010x} the footer declares")]
    Crc {
        /// Declared.
        saved: u32,
        /// Computed.
        calculated: u32,
    },
    /// The file cannot be read.
    #[error("{0}")]
    Io(String),
}

/// The statistics record of a summary section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryStats {
    /// Messages in the file.
    pub message_count: u64,
    /// Earliest log time, ns.
    pub message_start_time: u64,
    /// Latest log time, ns.
    pub message_end_time: u64,
    /// Messages per channel (at most 65536 entries: one per channel id).
    pub channel_message_counts: HashMap<u16, u64>,
}

/// What the summary section of a file holds: its schemas and channels (in a [`Catalog`] made with `limits` and
/// `filter`) and its statistics. `Ok(None)` for a file without a summary section; an error when it has one that
/// cannot be used (the file must then be read through to find its channels).
pub fn read_summary<R: Read + Seek>(
    mut file: R,
    limits: &Limits,
    filter: &[String],
) -> Result<Option<(Catalog, Option<SummaryStats>)>, SummaryError> {
    let io = |e: std::io::Error| SummaryError::Io(e.to_string());
    let len = file.seek(SeekFrom::End(0)).map_err(io)?;
    if len < 8 + FOOTER_AND_MAGIC {
        return Err(SummaryError::NoFooter);
    }
    let footer_pos = len - FOOTER_AND_MAGIC;
    file.seek(SeekFrom::Start(footer_pos)).map_err(io)?;
    let mut tail = [0u8; FOOTER_AND_MAGIC as usize];
    file.read_exact(&mut tail).map_err(io)?;
    if tail[0] != op::FOOTER || tail[1..9] != 20u64.to_le_bytes() || &tail[29..] != MAGIC {
        return Err(SummaryError::NoFooter);
    }
    let summary_start = u64::from_le_bytes(tail[9..17].try_into().unwrap_or_default());
    let saved = u32::from_le_bytes(tail[25..29].try_into().unwrap_or_default());
    if summary_start == 0 {
        return Ok(None);
    }
    if summary_start < 8 || summary_start > footer_pos {
        return Err(SummaryError::BadStart(summary_start));
    }
    file.seek(SeekFrom::Start(summary_start)).map_err(io)?;
    let mut catalog = Catalog::new(limits, filter);
    let mut stats = None;
    let mut crc = crc32fast::Hasher::new();
    let mut pos = summary_start;
    let mut buf = Vec::new();
    while pos < footer_pos {
        let mut head = [0u8; RECORD_HEADER as usize];
        if footer_pos - pos < RECORD_HEADER {
            return Err(SummaryError::Framing);
        }
        file.read_exact(&mut head).map_err(io)?;
        pos += RECORD_HEADER;
        let rec_len = u64::from_le_bytes(head[1..].try_into().unwrap_or_default());
        if rec_len > footer_pos - pos {
            return Err(SummaryError::Framing);
        }
        if rec_len > limits.max_record {
            return Err(SummaryError::TooLarge(rec_len));
        }
        if !read_into(&mut file, &mut buf, rec_len as usize).map_err(io)? {
            return Err(SummaryError::Framing);
        }
        pos += rec_len;
        crc.update(&head);
        crc.update(&buf);
        let opcode = head[0];
        if !matches!(opcode, op::SCHEMA | op::CHANNEL | op::STATISTICS) {
            continue;
        }
        match parse(opcode, &buf).map_err(|e| SummaryError::Parse(name_of(opcode), e))? {
            Rec::Statistics { message_count, message_start_time, message_end_time, channel_message_counts } => {
                stats = Some(SummaryStats {
                    message_count,
                    message_start_time,
                    message_end_time,
                    channel_message_counts: channel_message_counts.iter().collect(),
                });
            }
            r => {
                catalog.learn(&r);
            }
        }
    }
    if saved != 0 {
        crc.update(&tail[..25]);
        let calculated = crc.finalize();
        if calculated != saved {
            return Err(SummaryError::Crc { saved, calculated });
        }
    }
    Ok(Some((catalog, stats)))
}

/// A schema as far as playback needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaInfo {
    /// Schema name.
    pub name: String,
    /// Schema encoding.
    pub encoding: String,
    /// The schema.
    pub data: Vec<u8>,
}

/// A channel as far as playback needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelInfo {
    /// Topic name.
    pub topic: String,
    /// Its schema (0: none).
    pub schema_id: u16,
    /// Message encoding.
    pub message_encoding: String,
    /// Metadata.
    pub metadata: BTreeMap<String, String>,
}

/// Why a channel was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skip {
    /// Its topic is not among the ones asked for (`shoal play --topics`).
    Filtered,
    /// Beyond [`Limits::max_channels`].
    ChannelLimit,
    /// Beyond [`Limits::max_catalog_bytes`].
    ByteLimit,
    /// Its schema was beyond [`Limits::max_catalog_bytes`].
    SchemaSkipped,
}

/// The schemas and channels of a file, learnt from its summary and its records, within [`Limits::max_channels`]
/// and [`Limits::max_catalog_bytes`]. The first definition of an id is kept (a file repeats them in chunks and in
/// its summary); the ids not kept are remembered with the reason (at most 65536 of each: ids are 16-bit).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// The schemas kept, by id.
    pub schemas: HashMap<u16, SchemaInfo>,
    /// The channels kept, by id.
    pub channels: HashMap<u16, ChannelInfo>,
    skipped_channels: HashMap<u16, Skip>,
    skipped_schemas: HashSet<u16>,
    /// Bytes of the schemas not kept.
    pub skipped_schema_bytes: u64,
    bytes: usize,
    max_channels: usize,
    max_bytes: usize,
    filter: Vec<String>,
}

impl Catalog {
    /// An empty catalog keeping at most what `limits` allow and, when `filter` is not empty, only the channels of
    /// those topics.
    pub fn new(limits: &Limits, filter: &[String]) -> Catalog {
        Catalog {
            max_channels: limits.max_channels,
            max_bytes: limits.max_catalog_bytes,
            filter: filter.to_vec(),
            ..Catalog::default()
        }
    }

    /// Takes in a schema or channel record; returns the id of a channel record when this one was kept now.
    pub fn learn(&mut self, r: &Rec<'_>) -> Option<u16> {
        match *r {
            Rec::Schema { id, name, encoding, data } => {
                if self.schemas.contains_key(&id) || self.skipped_schemas.contains(&id) {
                    return None;
                }
                let size = name.len() + encoding.len() + data.len() + ENTRY_OVERHEAD;
                if self.bytes.saturating_add(size) > self.max_bytes {
                    self.skipped_schemas.insert(id);
                    self.skipped_schema_bytes = self.skipped_schema_bytes.saturating_add(data.len() as u64);
                    return None;
                }
                self.bytes += size;
                self.schemas.insert(
                    id,
                    SchemaInfo { name: name.to_owned(), encoding: encoding.to_owned(), data: data.to_vec() },
                );
                None
            }
            Rec::Channel { id, schema_id, topic, message_encoding, metadata } => {
                if self.channels.contains_key(&id) || self.skipped_channels.contains_key(&id) {
                    return None;
                }
                let size = topic.len()
                    + message_encoding.len()
                    + metadata.byte_len()
                    + metadata.len().saturating_mul(ENTRY_OVERHEAD)
                    + ENTRY_OVERHEAD;
                let skip = if !self.filter.is_empty() && !self.filter.iter().any(|t| t == topic) {
                    Some(Skip::Filtered)
                } else if schema_id != 0 && self.skipped_schemas.contains(&schema_id) {
                    Some(Skip::SchemaSkipped)
                } else if self.channels.len() >= self.max_channels {
                    Some(Skip::ChannelLimit)
                } else if self.bytes.saturating_add(size) > self.max_bytes {
                    Some(Skip::ByteLimit)
                } else {
                    None
                };
                if let Some(s) = skip {
                    self.skipped_channels.insert(id, s);
                    return None;
                }
                self.bytes += size;
                self.channels.insert(
                    id,
                    ChannelInfo {
                        topic: topic.to_owned(),
                        schema_id,
                        message_encoding: message_encoding.to_owned(),
                        metadata: metadata.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
                    },
                );
                Some(id)
            }
            _ => None,
        }
    }

    /// Why channel `id` was not kept (None: kept, or never seen).
    pub fn skipped(&self, id: u16) -> Option<Skip> {
        self.skipped_channels.get(&id).copied()
    }

    /// Channels not kept, per reason.
    pub fn skipped_counts(&self) -> BTreeMap<Skip, usize> {
        let mut m = BTreeMap::new();
        for s in self.skipped_channels.values() {
            *m.entry(*s).or_default() += 1;
        }
        m
    }

    /// Schemas not kept (over the byte budget).
    pub fn skipped_schemas(&self) -> usize {
        self.skipped_schemas.len()
    }

    /// Bytes charged for what is kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &str) -> Vec<u8> {
        let mut v = (s.len() as u32).to_le_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    }

    fn record(opcode: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![opcode];
        v.extend_from_slice(&(body.len() as u64).to_le_bytes());
        v.extend_from_slice(body);
        v
    }

    fn channel(id: u16, topic: &str) -> Vec<u8> {
        let mut b = id.to_le_bytes().to_vec();
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend(string(topic));
        b.extend(string("raw"));
        b.extend_from_slice(&0u32.to_le_bytes());
        record(op::CHANNEL, &b)
    }

    #[test]
    fn a_string_longer_than_its_record_is_an_error_not_an_allocation() {
        let mut b = 1u16.to_le_bytes().to_vec();
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(b"abc");
        assert_eq!(parse(op::SCHEMA, &b), Err(ParseError::Short("name")));
        // A map whose byte length runs past the record.
        let mut c = 1u16.to_le_bytes().to_vec();
        c.extend_from_slice(&0u16.to_le_bytes());
        c.extend(string("t"));
        c.extend(string("raw"));
        c.extend_from_slice(&1000u32.to_le_bytes());
        assert_eq!(parse(op::CHANNEL, &c), Err(ParseError::Short("metadata")));
    }

    #[test]
    fn a_chunk_declaring_more_than_the_limit_is_refused_before_decompression() {
        let h = ChunkHeader {
            message_start_time: 0,
            message_end_time: 0,
            uncompressed_size: 4 << 30,
            uncompressed_crc: 0,
            compression: "zstd",
            records: &[1, 2, 3],
        };
        assert_eq!(decompress(&h, 1 << 20), Err(ChunkError::TooLarge { declared: 4 << 30, limit: 1 << 20 }));
        // Within the limit but decompressing to more than declared: stops at the declared size.
        let bomb = zstd::bulk::compress(&vec![0u8; 1 << 20], 1).expect("compress");
        let h = ChunkHeader { uncompressed_size: 1000, records: &bomb, ..h };
        assert_eq!(decompress(&h, 1 << 20), Err(ChunkError::Larger { declared: 1000 }));
        let h = ChunkHeader { uncompressed_size: 2 << 20, ..h };
        assert_eq!(decompress(&h, 4 << 20), Err(ChunkError::Smaller { declared: 2 << 20, got: 1 << 20 }));
        // The same with lz4.
        let mut lz = Vec::new();
        let mut enc = lz4::EncoderBuilder::new().build(&mut lz).expect("lz4");
        std::io::Write::write_all(&mut enc, &vec![7u8; 100_000]).expect("lz4");
        enc.finish().1.expect("lz4");
        let h = ChunkHeader { uncompressed_size: 1000, compression: "lz4", records: &lz, ..h };
        assert_eq!(decompress(&h, 1 << 20), Err(ChunkError::Larger { declared: 1000 }));
        let h = ChunkHeader { uncompressed_size: 100_000, ..h };
        assert_eq!(decompress(&h, 1 << 20).map(|d| d.len()), Ok(100_000));
    }

    #[test]
    fn a_record_inside_a_chunk_longer_than_the_chunk_breaks_the_chunk() {
        let mut records = channel(1, "a");
        records.push(op::MESSAGE);
        records.extend_from_slice(&(1u64 << 40).to_le_bytes());
        let mut seen = 0;
        assert_eq!(
            chunk_records(&records, |_| {
                seen += 1;
                true
            }),
            Err(ChunkError::Framing)
        );
        assert_eq!(seen, 0, "nothing of a damaged chunk is given");
    }

    #[test]
    fn the_catalog_keeps_channels_and_schemas_within_its_limits() {
        let limits = Limits { max_channels: 2, max_catalog_bytes: 10_000, ..Limits::default() };
        let mut c = Catalog::new(&limits, &[]);
        let data = vec![0u8; 6000];
        let schema = |id| Rec::Schema { id, name: "s", encoding: "protobuf", data: &data };
        c.learn(&schema(1));
        c.learn(&schema(2));
        assert_eq!((c.schemas.len(), c.skipped_schemas()), (1, 1));
        let ch = |id, schema_id| Rec::Channel {
            id,
            schema_id,
            topic: "t",
            message_encoding: "protobuf",
            metadata: StrMap(&[]),
        };
        assert_eq!(c.learn(&ch(1, 1)), Some(1));
        assert_eq!(c.learn(&ch(1, 1)), None, "the first definition of an id is kept");
        assert_eq!(c.learn(&ch(2, 2)), None);
        assert_eq!(c.skipped(2), Some(Skip::SchemaSkipped));
        assert_eq!(c.learn(&ch(3, 0)), Some(3));
        assert_eq!(c.learn(&ch(4, 0)), None);
        assert_eq!(c.skipped(4), Some(Skip::ChannelLimit));
        let mut f = Catalog::new(&limits, &["x".to_string()]);
        assert_eq!(f.learn(&ch(1, 0)), None);
        assert_eq!(f.skipped(1), Some(Skip::Filtered));
    }

    #[test]
    fn a_record_above_the_limit_is_skipped_and_reading_goes_on() {
        let mut file = MAGIC.to_vec();
        file.extend(record(op::METADATA, &vec![0u8; 5000]));
        file.extend(channel(7, "after"));
        let limits = Limits { max_record: 1000, ..Limits::default() };
        let mut topics = Vec::new();
        let damage = read_records(std::io::Cursor::new(&file), &limits, |r| {
            if let Rec::Channel { topic, .. } = r {
                topics.push(topic.to_owned());
            }
            true
        })
        .expect("read");
        assert_eq!(topics, ["after"]);
        assert_eq!(damage.list.len(), 2, "{damage:?}");
        assert!(damage.list[0].what.contains("above the limit"), "{damage:?}");
        assert!(damage.list[1].what.contains("truncated"), "no footer: {damage:?}");
    }
}
