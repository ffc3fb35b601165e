//! A `Reassembler` with small, fuzzer-chosen limits fed a sequence of datagrams from several
//! senders at fuzzer-chosen times.
//!
//! Input format (read with `arbitrary::Unstructured`, written by `seedgen`; integers little-endian):
//! `[max_messages u8 (mod 16)][max_bytes u16][max_age_ms u16]`, then records
//! `[sender u8 (mod 4)][advance_ms u8][kind u8]` followed by, for `kind` 250 or 255, `[id i8]`: the caller gives
//! up that sender's message `id` (`Reassembler::abandon`, as the UDP receiver does at a gap the kernel's drop
//! count explains), for another `kind % 5 == 0`, `[len u16][len raw bytes]`, else `[id i8][num u16][len_override u16][payload_len u16][payload]`: a datagram with
//! a valid magic and version and type 1, 2, 3 (`kind % 5` = 1, 2, 3) or the unknown type `kind`
//! (`kind % 5 == 4`); its `len` field is `len_override`, or the payload length if that is 0xffff.
//! Structured records let the fuzzer spend its time in the reassembly logic rather than on the
//! magic check. After every step the invariants documented in `wire/reassembly.rs`
//! must hold:
//! - bytes charged never exceed `max_bytes`, messages in flight never exceed `max_messages`;
//! - a returned message is a whole datagram's payload, or a reassembled message no larger than
//!   `max_bytes`; `in_flight() == 0` implies `buffered_bytes() == 0`;
//! - every datagram is counted (an abandon counts the datagram that caused it); `next_expiry` is `None` exactly
//!   when nothing is in flight; an abandoned message is no longer held;
//! - `max_age` after the last step everything has expired and the budget is back at zero.
//!
//! A second reassembler receives the same datagrams in place, as the UDP receiver does while a fragmented
//! message comes (after a fragment or fragment info of a message, the next datagram's payload is appended to
//! that message's buffer, then committed when it is that message's next fragment, else taken back and pushed):
//! it must return the same messages and end every step with the same counters and bytes held.
#![no_main]

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use shoal::wire::{DatagramHeader, DatagramKind, HEADER_LEN, MAGIC, Reassembler, ReassemblyConfig, VERSION};

/// Record kinds (`kind % 5`): raw bytes, or a well-formed header of type 1, 2, 3 or an unknown
/// type (the `kind` byte itself) followed by a payload.
const KIND_RAW: u8 = 0;
/// `len_override` meaning "the payload length" (a consistent header).
const LEN_CONSISTENT: u16 = 0xffff;

/// One received datagram: who sent it, when, and its bytes.
#[derive(Debug)]
struct Step {
    /// Index into the four senders.
    sender: u8,
    /// Time advanced before this datagram, in milliseconds.
    advance_ms: u8,
    /// The datagram, or the message id to give up.
    what: What,
}

#[derive(Debug)]
enum What {
    Datagram(Vec<u8>),
    Abandon(i32),
}

/// `kind` values that give a message up instead of feeding a datagram.
const KIND_ABANDON: [u8; 2] = [250, 255];

/// Parses the input; the format is in the module docs. Integers are little-endian (arbitrary's
/// encoding); a truncated tail is read as zeros or a shorter payload.
fn parse(data: &[u8]) -> arbitrary::Result<(ReassemblyConfig, Vec<Step>)> {
    let mut u = Unstructured::new(data);
    let max_messages = usize::from(u8::arbitrary(&mut u)? % 16);
    let max_bytes = usize::from(u16::arbitrary(&mut u)?);
    let max_age = Duration::from_millis(u64::from(u16::arbitrary(&mut u)?));
    let mut steps = Vec::new();
    while !u.is_empty() {
        let sender = u8::arbitrary(&mut u)?;
        let advance_ms = u8::arbitrary(&mut u)?;
        let kind = u8::arbitrary(&mut u)?;
        if KIND_ABANDON.contains(&kind) {
            let id = i32::from(i8::arbitrary(&mut u)?);
            steps.push(Step { sender, advance_ms, what: What::Abandon(id) });
            continue;
        }
        let datagram = if kind % 5 == KIND_RAW {
            let len = usize::from(u16::arbitrary(&mut u)?);
            u.bytes(len.min(u.len()))?.to_vec()
        } else {
            let wire_kind = match kind % 5 {
                1 => DatagramKind::FragmentInfo.to_u32(),
                2 => DatagramKind::Fragment.to_u32(),
                3 => DatagramKind::Whole.to_u32(),
                _ => u32::from(kind),
            };
            let id = i32::from(i8::arbitrary(&mut u)?);
            let num = u32::from(u16::arbitrary(&mut u)?);
            let len_override = u16::arbitrary(&mut u)?;
            let payload_len = usize::from(u16::arbitrary(&mut u)?);
            let payload = u.bytes(payload_len.min(u.len()))?;
            let len = if len_override == LEN_CONSISTENT { payload.len() as u32 } else { u32::from(len_override) };
            let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
            out.extend_from_slice(&MAGIC);
            out.extend_from_slice(&[VERSION, 0, 0, 0]);
            out.extend_from_slice(&wire_kind.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&num.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(payload);
            out
        };
        steps.push(Step { sender, advance_ms, what: What::Datagram(datagram) });
    }
    // Half the slots per sender, so that both the per-sender bound and the eviction of the biggest holder run.
    let max_per_source = (max_messages / 2).max(1);
    Ok((ReassemblyConfig { max_age, max_messages, max_bytes, max_per_source }, steps))
}

/// One datagram into `r` as the UDP receiver takes it while it expects the next fragment of `expected`.
fn receive_in_place(
    r: &mut Reassembler,
    expected: Option<(SocketAddr, i32)>,
    now: Instant,
    from: SocketAddr,
    dg: &[u8],
) -> Result<Option<Vec<u8>>, shoal::wire::WireError> {
    if let Some((f, id)) = expected
        && let Some((index, room, target)) = r.next_fragment_target(now, f, id)
    {
        let keep = target.len();
        let body = dg.get(HEADER_LEN..).unwrap_or(&[]);
        let in_target = body.len().min(room);
        target.extend_from_slice(&body[..in_target]);
        let head: Option<&[u8; HEADER_LEN]> = dg.first_chunk();
        let fits = from == f
            && dg.len() == HEADER_LEN + in_target
            && head.and_then(|h| DatagramHeader::parse_head(h).ok()).is_some_and(|h| {
                h.kind == DatagramKind::Fragment && h.id == id && h.num == index && h.len as usize == in_target
            });
        if fits {
            return r.commit_in_place(f, id, index, in_target, |_| true);
        }
        let mut back = dg[..dg.len().min(HEADER_LEN)].to_vec();
        r.undo_in_place(f, id, keep, &mut back);
        back.extend_from_slice(&body[in_target..]);
        assert_eq!(back, dg, "the datagram gathered back whole");
    }
    r.push(now, from, dg).map(|m| m.map(Cow::into_owned))
}

fn check_invariants(r: &Reassembler, cfg: &ReassemblyConfig) {
    assert!(r.buffered_bytes() <= cfg.max_bytes, "buffered {} > cap {}", r.buffered_bytes(), cfg.max_bytes);
    assert!(r.in_flight() <= cfg.max_messages, "in flight {} > cap {}", r.in_flight(), cfg.max_messages);
    if r.in_flight() == 0 {
        assert_eq!(r.buffered_bytes(), 0, "bytes charged with nothing in flight");
    }
    assert_eq!(r.next_expiry().is_some(), r.in_flight() > 0);
}

fuzz_target!(|data: &[u8]| {
    let Ok((cfg, steps)) = parse(data) else { return };
    let mut r = Reassembler::new(cfg.clone());
    let senders: [SocketAddr; 4] = [
        SocketAddr::from(([127, 0, 0, 1], 14000)),
        SocketAddr::from(([127, 0, 0, 1], 14001)),
        SocketAddr::from(([10, 0, 0, 2], 14000)),
        SocketAddr::from(([0, 0, 0, 0, 0, 0, 0, 1], 14000)),
    ];
    let mut placed = Reassembler::new(cfg.clone());
    let mut expected: Option<(SocketAddr, i32)> = None;
    let start = Instant::now();
    let mut now = start;
    let mut counted = 0u64;
    for step in &steps {
        now += Duration::from_millis(u64::from(step.advance_ms));
        let from = senders[usize::from(step.sender % 4)];
        let bytes = match &step.what {
            What::Datagram(d) => d,
            What::Abandon(id) => {
                let (bytes, held) = (r.buffered_bytes(), r.in_flight());
                let gone = r.abandon(from, *id);
                assert_eq!(placed.abandon(from, *id), gone, "in place: another message held");
                assert_eq!(placed.counters(), r.counters(), "in place: other counters after an abandon");
                if gone {
                    counted += 1;
                    assert_eq!(r.in_flight(), held - 1, "the abandoned message is no longer held");
                    assert!(r.buffered_bytes() <= bytes);
                } else {
                    assert_eq!((r.buffered_bytes(), r.in_flight()), (bytes, held), "nothing held changed");
                }
                assert_eq!(r.counters().datagrams, counted);
                check_invariants(&r, &cfg);
                continue;
            }
        };
        counted += 1;
        let before = *r.counters();
        let in_place = receive_in_place(&mut placed, expected, now, from, bytes);
        expected = match DatagramHeader::parse(bytes) {
            Ok((h, _)) if h.kind != DatagramKind::Whole => Some((from, h.id)),
            _ => None,
        };
        let pushed = r.push(now, from, bytes);
        match (&pushed, &in_place) {
            (Ok(Some(a)), Ok(Some(b))) => assert_eq!(&a[..], &b[..], "in place: another message"),
            (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
            (a, b) => panic!("pushed {a:?}, in place {b:?}"),
        }
        assert_eq!(placed.counters(), r.counters(), "in place: other counters");
        assert_eq!(placed.buffered_bytes(), r.buffered_bytes(), "in place: other bytes held");
        assert_eq!(placed.in_flight(), r.in_flight(), "in place: other messages held");
        match pushed {
            Ok(Some(Cow::Borrowed(m))) => {
                // Only a whole datagram is returned borrowed: exactly its declared payload.
                let (h, payload) = DatagramHeader::parse(bytes).expect("a returned datagram must parse");
                assert_eq!(h.kind, DatagramKind::Whole);
                assert_eq!(m, payload);
                assert_eq!(r.counters().whole_messages, before.whole_messages + 1);
            }
            Ok(Some(Cow::Owned(m))) => {
                assert!(m.len() <= cfg.max_bytes, "reassembled {} bytes > cap {}", m.len(), cfg.max_bytes);
                assert_eq!(r.counters().reassembled_messages, before.reassembled_messages + 1);
            }
            Ok(None) => {}
            Err(_) => {}
        }
        assert_eq!(r.counters().datagrams, counted);
        check_invariants(&r, &cfg);
        if let Some(expiry) = r.next_expiry() {
            assert!(expiry > now || cfg.max_age.is_zero(), "an expired message is still held");
        }
    }
    // Everything still incomplete expires max_age after its first datagram at the latest.
    let in_flight = r.in_flight();
    let expired = r.expire(now + cfg.max_age);
    assert_eq!(expired, in_flight);
    assert_eq!(r.in_flight(), 0);
    assert_eq!(r.buffered_bytes(), 0, "budget not returned after expiry");
    check_invariants(&r, &cfg);
});
