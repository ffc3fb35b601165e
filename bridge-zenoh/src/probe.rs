//! The messages the tests and the measurement send through the bridges and check on arrival: a protobuf
//! `shoal_zenoh.test.Probe` ([`PROTO`]) of exactly the requested size, carrying its number and its send time, the
//! rest a pattern that depends on the number. `tests/zenoh/peer.py` builds and checks the same bytes.

use std::time::{SystemTime, UNIX_EPOCH};

/// The protobuf definition of the probe message.
pub const PROTO: &str = "syntax = \"proto3\";\npackage shoal_zenoh.test;\n\
message Probe {\n  fixed64 seq = 1;\n  fixed64 sent_ns = 2;\n  bytes pad = 3;\n}\n";

/// Its full name.
pub const TYPE: &str = "shoal_zenoh.test.Probe";

/// The smallest probe: the two fixed64 fields and an empty `pad` (tag and length).
pub const MIN_SIZE: usize = 20;

/// Nanoseconds since the UNIX epoch.
pub fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn varint_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

/// The pad's pattern repeats every this many bytes.
const PERIOD: usize = 251;

/// The pattern byte of position `i` of probe `seq`.
fn fill(seq: u64, i: usize) -> u8 {
    u8::try_from((seq as usize).wrapping_add(i) % PERIOD).unwrap_or(0)
}

/// One period of probe `seq`'s pattern (positions 0..PERIOD), copied and compared a period at a time, so that a
/// large probe costs what a copy costs.
fn pattern(seq: u64) -> [u8; PERIOD] {
    std::array::from_fn(|i| fill(seq, i))
}

/// Probe `seq` of `size` bytes (at least [`MIN_SIZE`]; one byte less for the few sizes where the pad's length
/// varint grows, e.g. 148 and 16405).
pub fn encode(seq: u64, sent_ns: u64, size: usize) -> Vec<u8> {
    let size = size.max(MIN_SIZE);
    // 18 bytes of fixed64 fields, the pad's tag, its length's varint, the pad.
    let mut pad = size - 19 - 1;
    while 19 + varint_len(pad) + pad > size {
        pad -= 1;
    }
    let mut out = Vec::with_capacity(size);
    out.push(0x09);
    out.extend_from_slice(&seq.to_le_bytes());
    out.push(0x11);
    out.extend_from_slice(&sent_ns.to_le_bytes());
    out.push(0x1a);
    let mut n = pad;
    while n >= 0x80 {
        out.push(u8::try_from(n & 0x7f).unwrap_or(0) | 0x80);
        n >>= 7;
    }
    out.push(u8::try_from(n).unwrap_or(0));
    let start = out.len();
    let cycle = pattern(seq);
    while out.len() - start < pad {
        let n = (pad - (out.len() - start)).min(PERIOD);
        out.extend_from_slice(&cycle[..n]);
    }
    // At a varint boundary (sizes 148, 16405, ...) no pad length gives the exact size: the probe is a byte short.
    debug_assert!(out.len() <= size && out.len() >= start);
    out
}

/// A probe's number and send time, if `bytes` is an intact probe.
pub fn decode(bytes: &[u8]) -> Option<(u64, u64)> {
    if bytes.len() < MIN_SIZE || bytes[0] != 0x09 || bytes[9] != 0x11 || bytes[18] != 0x1a {
        return None;
    }
    let seq = u64::from_le_bytes(bytes[1..9].try_into().ok()?);
    let sent = u64::from_le_bytes(bytes[10..18].try_into().ok()?);
    let (mut pad, mut shift, mut i) = (0usize, 0, 19);
    loop {
        let b = *bytes.get(i)?;
        pad |= usize::from(b & 0x7f) << shift;
        i += 1;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let body = &bytes[i..];
    let cycle = pattern(seq);
    (body.len() == pad && body.chunks(PERIOD).all(|c| c == &cycle[..c.len()])).then_some((seq, sent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_exact_sizes() {
        for size in [MIN_SIZE, 64, 147, 149, 1000, 16_404, 1 << 20, 8 << 20] {
            let p = encode(42, 7, size);
            assert_eq!(p.len(), size, "size {size}");
            assert_eq!(decode(&p), Some((42, 7)));
        }
        assert_eq!(encode(1, 1, 148).len(), 147);
        let mut p = encode(3, 1, 64);
        p[40] ^= 1;
        assert_eq!(decode(&p), None);
        assert_eq!(decode(&encode(3, 1, 64)[..63]), None);
    }
}
