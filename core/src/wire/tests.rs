use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng, rngs::StdRng};

use super::*;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn ids() -> impl FnMut() -> i32 {
    let mut next = 0x1234_5678;
    move || {
        next += 1;
        next
    }
}

/// Feeds datagrams in order and returns every completed message.
fn feed(r: &mut Reassembler, now: Instant, from: SocketAddr, dgrams: &[Vec<u8>]) -> Vec<Vec<u8>> {
    dgrams.iter().filter_map(|d| r.push(now, from, d).ok().flatten().map(Cow::into_owned)).collect()
}

#[test]
fn header_round_trip_and_layout() {
    let h = DatagramHeader { kind: DatagramKind::Fragment, id: -7, num: 3, len: 2 };
    let mut bytes = h.to_bytes().to_vec();
    assert_eq!(&bytes[0..8], b"ECAL\x05\x00\x00\x00");
    assert_eq!(&bytes[8..12], &2u32.to_le_bytes());
    assert_eq!(&bytes[12..16], &(-7i32).to_le_bytes());
    bytes.extend_from_slice(b"xyz");
    let (parsed, payload) = DatagramHeader::parse(&bytes).unwrap();
    assert_eq!(parsed, h);
    assert_eq!(payload, b"xy", "only len bytes are payload");
}

#[test]
fn header_rejects_bad_input() {
    let good = DatagramHeader::whole(0).to_bytes();
    assert_eq!(DatagramHeader::parse(&good[..23]), Err(WireError::TooShort { len: 23 }));
    let mut bad = good;
    bad[0] = b'X';
    assert_eq!(DatagramHeader::parse(&bad), Err(WireError::BadMagic));
    let mut bad = good;
    bad[4] = 6;
    assert_eq!(DatagramHeader::parse(&bad), Err(WireError::UnsupportedVersion(6)));
    let mut bad = good;
    bad[8] = 4;
    assert_eq!(DatagramHeader::parse(&bad), Err(WireError::UnknownType(4)));
    let long = DatagramHeader::whole(5).to_bytes();
    assert_eq!(DatagramHeader::parse(&long), Err(WireError::LengthExceedsDatagram { declared: 5, available: 0 }));
    // Info datagrams carry the total length with no payload: accepted.
    let info = DatagramHeader { kind: DatagramKind::FragmentInfo, id: 1, num: 2, len: 100 }.to_bytes();
    assert_eq!(DatagramHeader::parse(&info).unwrap().1.len(), 0);
}

#[test]
fn whole_message_round_trip() {
    let dgrams = encode_message("reg_sample", b"\x08\x04", DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut ids()).unwrap();
    assert_eq!(dgrams.len(), 1);
    let d = &dgrams[0];
    assert_eq!(d.len(), 24 + 2 + 11 + 2);
    assert_eq!(&d[24..37], b"\x0b\x00reg_sample\x00");
    let (h, _) = DatagramHeader::parse(d).unwrap();
    assert_eq!(h, DatagramHeader { kind: DatagramKind::Whole, id: -1, num: 1, len: 15 });
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let msg = r.push(Instant::now(), addr(1), d).unwrap().unwrap();
    assert!(matches!(msg, Cow::Borrowed(_)));
    assert_eq!(split_name(&msg).unwrap(), ("reg_sample", &b"\x08\x04"[..]));
}

#[test]
fn fragmentation_boundary() {
    let limit = 100;
    let name = "t"; // prefix = 2 + 1 + 1 = 4 bytes
    let fits: Vec<u8> = (0..96u8).collect();
    let one = encode_message(name, &fits, limit, &mut ids()).unwrap();
    assert_eq!(one.len(), 1, "framed == limit stays whole");
    assert_eq!(one[0].len(), 24 + 100);

    let over: Vec<u8> = (0..97u8).collect();
    let many = encode_message(name, &over, limit, &mut ids()).unwrap();
    assert_eq!(many.len(), 3, "info + 2 fragments");
    let (info, p) = DatagramHeader::parse(&many[0]).unwrap();
    assert_eq!((info.kind, info.num, info.len, p.len()), (DatagramKind::FragmentInfo, 2, 101, 0));
    assert_eq!(many[0].len(), 24);
    let (f0, p0) = DatagramHeader::parse(&many[1]).unwrap();
    let (f1, p1) = DatagramHeader::parse(&many[2]).unwrap();
    assert_eq!((f0.kind, f0.num, f0.len, f0.id), (DatagramKind::Fragment, 0, 100, info.id));
    assert_eq!((f1.kind, f1.num, f1.len, f1.id), (DatagramKind::Fragment, 1, 1, info.id));
    assert_eq!(&p0[..4], b"\x02\x00t\x00");
    assert_eq!(p1, &[96u8]);

    let mut r = Reassembler::new(ReassemblyConfig::default());
    let out = feed(&mut r, Instant::now(), addr(1), &many);
    assert_eq!(out.len(), 1);
    assert_eq!(split_name(&out[0]).unwrap(), (name, &over[..]));
    assert_eq!(r.in_flight(), 0);
    assert_eq!(r.buffered_bytes(), 0);
}

#[test]
fn fragment_sizes_match_ecal_capture_d() {
    // Capture D: total 150084 -> 3 fragments; datagrams of 65507, 65507, 19142 bytes.
    let name = "big";
    let payload = vec![0xA5u8; 150_084 - framed_len(name, 0)];
    let d = encode_message(name, &payload, DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0xce7d7a69u32 as i32).unwrap();
    assert_eq!(&d[0][8..24], &[1, 0, 0, 0, 0x69, 0x7a, 0x7d, 0xce, 3, 0, 0, 0, 0x44, 0x4a, 0x02, 0x00]);
    let sizes: Vec<usize> = d.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![24, 65_507, 65_507, 19_142]);
    assert_eq!(&d[3][20..24], &0x4aaeu32.to_le_bytes());
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let out = feed(&mut r, Instant::now(), addr(9), &d);
    assert_eq!(split_name(&out[0]).unwrap(), (name, &payload[..]));
}

#[test]
fn reassembly_out_of_order_and_per_sender() {
    let payload: Vec<u8> = (0..250u32).map(|i| i as u8).collect();
    let d = encode_message("x", &payload, 64, &mut || 77).unwrap();
    assert_eq!(d.len(), 1 + 4);
    let now = Instant::now();
    let mut r = Reassembler::new(ReassemblyConfig::default());
    // Fragments before the info, in reverse, interleaved with a second sender using the same id.
    let mut got = Vec::new();
    for dg in d.iter().rev() {
        got.extend(feed(&mut r, now, addr(1), std::slice::from_ref(dg)));
        got.extend(feed(&mut r, now, addr(2), std::slice::from_ref(dg)));
    }
    assert_eq!(got.len(), 2);
    for m in &got {
        assert_eq!(split_name(m).unwrap().1, &payload[..]);
    }
    assert_eq!(r.counters().reassembled_messages, 2);
    assert_eq!(r.buffered_bytes(), 0);
}

#[test]
fn fragments_in_any_order_reassemble_into_one_buffer_of_the_declared_size() {
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let d = encode_message("order", &payload, 100, &mut || 9).unwrap();
    let (info, frags) = d.split_first().unwrap();
    let mut rng = StdRng::seed_from_u64(14);
    for round in 0..20 {
        let mut order: Vec<usize> = (0..frags.len()).collect();
        // Round 0 in order, then shuffled, with the info first, last or in between.
        if round > 0 {
            for i in (1..order.len()).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
        }
        let info_at = if round == 0 { 0 } else { rng.random_range(0..=order.len()) };
        let mut seq: Vec<&Vec<u8>> = order.iter().map(|&i| &frags[i]).collect();
        seq.insert(info_at, info);
        let mut r = Reassembler::new(ReassemblyConfig::default());
        let now = Instant::now();
        let mut out = Vec::new();
        for dg in seq {
            if let Some(m) = r.push(now, addr(1), dg).unwrap() {
                out.push(m.into_owned());
            }
        }
        assert_eq!(out.len(), 1, "round {round}");
        assert_eq!(split_name(&out[0]).unwrap(), ("order", &payload[..]), "round {round}");
        assert_eq!((r.in_flight(), r.buffered_bytes()), (0, 0));
    }
    // Info first (as eCAL sends it), fragments in order: the message is built in one buffer reserved at the
    // declared size, and handed out as it is.
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let now = Instant::now();
    let mut whole = None;
    for dg in &d {
        if let Some(Cow::Owned(m)) = r.push(now, addr(1), dg).unwrap() {
            whole = Some(m);
        }
    }
    let whole = whole.expect("reassembled");
    assert_eq!(whole.capacity(), whole.len(), "one allocation of exactly the declared total");
}

#[test]
fn a_message_the_filter_refuses_is_counted_not_stored_and_others_still_complete() {
    let big = vec![3u8; 5000];
    let refused = encode_message("nobody/here", &big, 1000, &mut || 1).unwrap();
    let wanted = encode_message("wanted", &big, 1000, &mut || 2).unwrap();
    let now = Instant::now();
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let keep = |first: &[u8]| split_name(first).map(|(n, _)| n == "wanted").unwrap_or(true);
    let mut out = Vec::new();
    let mut asked = 0;
    // Interleaved; the refused message's last fragment comes first (before its first one tells its topic).
    let mut order: Vec<(&Vec<u8>, bool)> = Vec::new();
    order.push((refused.last().unwrap(), false));
    for i in 0..refused.len() - 1 {
        order.push((&refused[i], false));
        order.push((&wanted[i], true));
    }
    order.push((wanted.last().unwrap(), true));
    for (dg, _) in order {
        let got = r
            .push_filtered(now, addr(1), dg, |first| {
                asked += 1;
                keep(first)
            })
            .unwrap();
        if let Some(m) = got {
            out.push(m.into_owned());
        }
        // Once refused, a message holds no payload bytes: only a fixed charge until its last fragment is counted
        // (the rest is the wanted message's declared total and its fragments' bookkeeping).
        if r.counters().refused == 1 {
            let wanted_total = big.len() + 9;
            assert!(r.buffered_bytes() <= wanted_total + 64 * wanted.len() + 64, "{}", r.buffered_bytes());
        }
    }
    assert_eq!(asked, 2, "the filter sees each message's first fragment once");
    assert_eq!(out.len(), 1);
    assert_eq!(split_name(&out[0]).unwrap(), ("wanted", &big[..]));
    assert_eq!(r.counters().refused, 1);
    assert_eq!(r.counters().reassembled_messages, 1);
    assert_eq!((r.in_flight(), r.buffered_bytes()), (0, 0), "the refused message is gone once all its fragments came");
}

#[test]
fn duplicates_are_dropped_and_counted() {
    let d = encode_message("x", &[1u8; 200], 64, &mut || 5).unwrap();
    let now = Instant::now();
    let mut r = Reassembler::new(ReassemblyConfig::default());
    assert_eq!(r.push(now, addr(1), &d[0]), Ok(None));
    assert_eq!(r.push(now, addr(1), &d[0]), Err(WireError::DuplicateInfo));
    assert_eq!(r.push(now, addr(1), &d[1]), Ok(None));
    assert_eq!(r.push(now, addr(1), &d[1]), Err(WireError::DuplicateFragment { index: 0 }));
    let out = feed(&mut r, now, addr(1), &d[2..]);
    assert_eq!(out.len(), 1, "message still completes after duplicates");
    assert_eq!(r.counters().duplicate_fragments, 1);
    assert_eq!(r.counters().duplicate_infos, 1);
}

#[test]
fn out_of_range_indexes() {
    let now = Instant::now();
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let info = DatagramHeader { kind: DatagramKind::FragmentInfo, id: 3, num: 2, len: 4 }.to_bytes().to_vec();
    let frag = |num: u32| {
        let mut v = DatagramHeader { kind: DatagramKind::Fragment, id: 3, num, len: 2 }.to_bytes().to_vec();
        v.extend_from_slice(b"ab");
        v
    };
    r.push(now, addr(1), &info).unwrap();
    assert_eq!(r.push(now, addr(1), &frag(2)), Err(WireError::FragmentIndexOutOfRange { index: 2, count: 2 }));
    assert_eq!(r.in_flight(), 1, "after the info only the bad fragment is dropped");
    assert_eq!(r.counters().out_of_range, 1);

    // Fragment with a large index before the info: the info then drops the whole message.
    let other = addr(2);
    r.push(now, other, &frag(9)).unwrap();
    assert_eq!(r.push(now, other, &info), Err(WireError::FragmentIndexOutOfRange { index: 9, count: 2 }));
    assert_eq!(r.counters().out_of_range, 2);
    assert_eq!(r.in_flight(), 1);
}

#[test]
fn length_mismatch_and_invalid_info() {
    let now = Instant::now();
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let info = DatagramHeader { kind: DatagramKind::FragmentInfo, id: 1, num: 2, len: 10 }.to_bytes().to_vec();
    let mut f0 = DatagramHeader { kind: DatagramKind::Fragment, id: 1, num: 0, len: 2 }.to_bytes().to_vec();
    f0.extend_from_slice(b"ab");
    let mut f1 = f0.clone();
    f1[16] = 1;
    r.push(now, addr(1), &info).unwrap();
    r.push(now, addr(1), &f0).unwrap();
    assert_eq!(r.push(now, addr(1), &f1), Err(WireError::LengthMismatch { declared: 10, received: 4 }));
    assert_eq!(r.counters().length_mismatch, 1);
    assert_eq!((r.in_flight(), r.buffered_bytes()), (0, 0));

    let zero = DatagramHeader { kind: DatagramKind::FragmentInfo, id: 2, num: 0, len: 10 }.to_bytes();
    assert!(matches!(r.push(now, addr(1), &zero), Err(WireError::InvalidFragmentInfo { .. })));
    let too_many = DatagramHeader { kind: DatagramKind::FragmentInfo, id: 2, num: 11, len: 10 }.to_bytes();
    assert!(matches!(r.push(now, addr(1), &too_many), Err(WireError::InvalidFragmentInfo { .. })));
    assert_eq!(r.counters().invalid_info, 2);
}

#[test]
fn incomplete_messages_expire_after_five_seconds() {
    let t0 = Instant::now();
    let d = encode_message("x", &[7u8; 300], 100, &mut || 11).unwrap();
    let mut r = Reassembler::new(ReassemblyConfig::default());
    feed(&mut r, t0, addr(1), &d[..2]);
    assert_eq!(r.in_flight(), 1);
    assert_eq!(r.next_expiry(), Some(t0 + Duration::from_secs(5)));
    assert_eq!(r.expire(t0 + Duration::from_millis(4999)), 0);
    assert_eq!(r.expire(t0 + Duration::from_secs(5)), 1);
    assert_eq!((r.in_flight(), r.buffered_bytes(), r.counters().expired), (0, 0, 1));
    // The rest arriving late does not produce a message (its info is gone).
    let late = feed(&mut r, t0 + Duration::from_secs(6), addr(1), &d[2..]);
    assert!(late.is_empty());
}

#[test]
fn a_sender_filling_the_byte_budget_gives_way_to_one_holding_less() {
    let now = Instant::now();
    let cfg =
        ReassemblyConfig { max_age: Duration::from_secs(5), max_messages: 64, max_bytes: 10_000, max_per_source: 8 };
    let mut r = Reassembler::new(cfg);
    // A flooder declares messages of 6000 bytes and never completes them: each new one supersedes its last.
    for id in 0..20 {
        let d = DatagramHeader { kind: DatagramKind::FragmentInfo, id, num: 3, len: 6000 }.to_bytes();
        r.push(now, addr(9), &d).unwrap();
        assert!(r.buffered_bytes() <= 10_000);
    }
    // Other flooding senders, each holding as much as the first, are refused.
    for a in 10..20 {
        let d = DatagramHeader { kind: DatagramKind::FragmentInfo, id: 1, num: 3, len: 6000 }.to_bytes();
        assert_eq!(r.push(now, addr(a), &d), Err(WireError::BufferFull { limit: 10_000 }));
    }
    // A good sender's 5000-byte message evicts the flooder's and is delivered whole.
    let good = encode_message("good", &[3u8; 4990], 1000, &mut || 42).unwrap();
    let out = feed(&mut r, now, addr(1), &good);
    assert_eq!(out.len(), 1, "the good message was reassembled");
    assert_eq!(split_name(&out[0]).unwrap(), ("good", &[3u8; 4990][..]));
    assert!(r.counters().buffer_limit >= 11);
}

#[test]
fn caps_on_messages_and_bytes() {
    let now = Instant::now();
    let cfg =
        ReassemblyConfig { max_age: Duration::from_secs(5), max_messages: 2, max_bytes: 1000, max_per_source: 64 };
    let mut r = Reassembler::new(cfg);
    let info =
        |id: i32, len: u32| DatagramHeader { kind: DatagramKind::FragmentInfo, id, num: 2, len }.to_bytes().to_vec();
    // Declared total above the cap: refused before anything is stored.
    assert_eq!(r.push(now, addr(1), &info(1, 1001)), Err(WireError::MessageTooLarge { declared: 1001, limit: 1000 }));
    assert_eq!(r.in_flight(), 0);
    // Budget: 600 + 600 > 1000. Another sender holding less is refused; the same sender's newer message
    // supersedes its older one.
    r.push(now, addr(1), &info(2, 600)).unwrap();
    assert_eq!(r.buffered_bytes(), 600);
    assert_eq!(r.push(now, addr(2), &info(3, 600)), Err(WireError::BufferFull { limit: 1000 }));
    assert_eq!((r.buffered_bytes(), r.in_flight()), (600, 1));
    r.push(now, addr(1), &info(3, 600)).unwrap();
    assert_eq!((r.buffered_bytes(), r.in_flight()), (600, 1));
    // Messages in flight.
    r.push(now, addr(1), &info(4, 10)).unwrap();
    assert_eq!(r.in_flight(), 2);
    // Full: the sender's newest message supersedes its oldest.
    r.push(now, addr(1), &info(5, 10)).unwrap();
    assert_eq!(r.in_flight(), 2);
    let c = r.counters();
    assert_eq!((c.too_large, c.buffer_limit, c.in_flight_limit), (1, 2, 1));
    // Fragments without info are bounded by the budget too.
    let mut r = Reassembler::new(ReassemblyConfig { max_bytes: 500, ..Default::default() });
    let mut frag = DatagramHeader { kind: DatagramKind::Fragment, id: 9, num: 0, len: 200 }.to_bytes().to_vec();
    frag.extend_from_slice(&[0u8; 200]);
    r.push(now, addr(1), &frag).unwrap();
    frag[16] = 1;
    assert!(r.push(now, addr(1), &frag).is_err());
    assert_eq!(r.buffered_bytes(), 0, "the message over budget is dropped whole");
}

#[test]
fn split_name_edge_cases() {
    assert_eq!(split_name(b""), Err(WireError::NamePrefixTruncated { available: 0, declared: 2 }));
    assert_eq!(split_name(b"\x05\x00ab"), Err(WireError::NamePrefixTruncated { available: 4, declared: 7 }));
    assert_eq!(split_name(b"\x00\x00pay").unwrap(), ("", &b"pay"[..]));
    assert_eq!(split_name(b"\x02\x00ab").unwrap(), ("ab", &b""[..]), "missing NUL tolerated");
    assert_eq!(split_name(b"\x03\x00\xff\x00\x00"), Err(WireError::NameNotUtf8));
}

#[test]
fn encode_errors() {
    assert_eq!(encode_message("a\0b", b"", 100, &mut ids()), Err(EncodeError::NameContainsNul));
    assert_eq!(encode_message("a", b"", 0, &mut ids()), Err(EncodeError::ZeroFragmentSize));
    let long = "n".repeat(65_535);
    assert_eq!(encode_message(&long, b"", 100, &mut ids()), Err(EncodeError::NameTooLong { len: 65_535 }));
    assert!(encode_message(&long[..65_534], b"", 1 << 20, &mut ids()).is_ok());
}

#[test]
fn random_bytes_never_panic_and_stay_bounded() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let cfg =
        ReassemblyConfig { max_age: Duration::from_secs(5), max_messages: 8, max_bytes: 64 * 1024, max_per_source: 64 };
    let mut r = Reassembler::new(cfg);
    let t0 = Instant::now();
    for i in 0..20_000u32 {
        let len = rng.random_range(0..300);
        let mut d: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if len >= 24 && rng.random_bool(0.8) {
            // Valid-looking header with random type/id/num/len to reach the deep paths.
            d[0..4].copy_from_slice(b"ECAL");
            d[4] = 5;
            d[8..12].copy_from_slice(&rng.random_range(1u32..=3).to_le_bytes());
            d[12..16].copy_from_slice(&rng.random_range(0i32..4).to_le_bytes());
            d[16..20].copy_from_slice(&rng.random_range(0u32..6).to_le_bytes());
            d[20..24].copy_from_slice(&rng.random_range(0u32..400).to_le_bytes());
        }
        let now = t0 + Duration::from_millis(u64::from(i));
        if let Ok(Some(m)) = r.push(now, addr(rng.random_range(1..4)), &d) {
            let _ = split_name(&m);
        }
        assert!(r.buffered_bytes() <= 64 * 1024);
        assert!(r.in_flight() <= 8);
    }
    assert!(r.counters().malformed > 0);
    assert!(r.counters().reassembled_messages + r.counters().duplicate_fragments > 0);
}

#[test]
fn a_sender_at_its_limit_replaces_its_oldest_incomplete_message_and_others_are_untouched() {
    let t0 = Instant::now();
    let cfg = ReassemblyConfig { max_per_source: 2, ..ReassemblyConfig::default() };
    let mut r = Reassembler::new(cfg);
    let info =
        |id: i32, len: u32| DatagramHeader { kind: DatagramKind::FragmentInfo, id, num: 2, len }.to_bytes().to_vec();
    r.push(t0, addr(2), &info(100, 10)).unwrap();
    for (i, id) in (1..=5).enumerate() {
        r.push(t0 + Duration::from_millis(i as u64), addr(1), &info(id, 10)).unwrap();
    }
    // addr(1) keeps its two newest (ids 4 and 5), addr(2) its one.
    assert_eq!((r.in_flight(), r.counters().source_limit), (3, 3));
    // The newest message of addr(1) still completes.
    let payload = [7u8; 10];
    let mut done = Vec::new();
    for num in 0..2u32 {
        let mut d = DatagramHeader { kind: DatagramKind::Fragment, id: 5, num, len: 5 }.to_bytes().to_vec();
        d.extend_from_slice(&payload[num as usize * 5..][..5]);
        if let Some(m) = r.push(t0, addr(1), &d).unwrap() {
            done.push(m.into_owned());
        }
    }
    assert_eq!(done, vec![payload.to_vec()]);
}

#[test]
fn a_full_table_makes_room_for_another_sender_at_the_expense_of_the_biggest_holder() {
    let now = Instant::now();
    let cfg = ReassemblyConfig { max_messages: 4, max_per_source: 4, ..ReassemblyConfig::default() };
    let mut r = Reassembler::new(cfg);
    let info = |id: i32| DatagramHeader { kind: DatagramKind::FragmentInfo, id, num: 2, len: 10 }.to_bytes().to_vec();
    // One sender takes every slot.
    for id in 0..4 {
        r.push(now + Duration::from_millis(id as u64), addr(1), &info(id)).unwrap();
    }
    assert_eq!(r.in_flight(), 4);
    // Another sender still gets in: the flooder's oldest message goes.
    r.push(now + Duration::from_millis(5), addr(2), &info(100)).unwrap();
    assert_eq!(r.in_flight(), 4);
    assert_eq!(r.counters().in_flight_limit, 1);
    // The flooder (3 held) cannot push the newcomer (1 held) out: its next new message supersedes its own oldest.
    r.push(now + Duration::from_millis(4), addr(1), &info(4)).unwrap();
    assert_eq!(r.in_flight(), 4);
    // A third sender, then a fourth: each gets in at the expense of the flooder.
    r.push(now + Duration::from_millis(10), addr(3), &info(200)).unwrap();
    r.push(now + Duration::from_millis(20), addr(4), &info(300)).unwrap();
    // Everyone holds one now: a fifth sender (0 held) takes the oldest of them, the flooder's last (many
    // addresses holding one each cannot lock a newcomer out either).
    r.push(now + Duration::from_millis(30), addr(5), &info(400)).unwrap();
    assert_eq!((r.in_flight(), r.counters().in_flight_limit), (4, 5));
    // A sender holding one cannot take a slot of others holding one: its new message supersedes its own.
    r.push(now + Duration::from_millis(40), addr(5), &info(401)).unwrap();
    // The newcomers' messages are all still there: completing addr(2)'s delivers it.
    let frag = |id: i32, num: u32| {
        let mut d = DatagramHeader { kind: DatagramKind::Fragment, id, num, len: 5 }.to_bytes().to_vec();
        d.extend_from_slice(&[num as u8; 5]);
        d
    };
    assert_eq!(r.push(now, addr(2), &frag(100, 0)), Ok(None));
    assert!(r.push(now, addr(2), &frag(100, 1)).unwrap().is_some());
    // addr(5)'s newer message took its older one's place.
    assert_eq!(r.push(now, addr(5), &frag(401, 0)), Ok(None));
    assert!(r.push(now, addr(5), &frag(401, 1)).unwrap().is_some());
    assert_eq!(r.push(now, addr(5), &frag(400, 0)), Ok(None), "400 is gone: a new entry");
}

/// A message in pieces goes out in exactly the datagrams of the same message in one buffer, for every size around
/// the fragment boundaries and any cut into pieces (empty ones too), each datagram at most the header plus a slice
/// per piece.
#[test]
fn pieces_frame_exactly_as_one_buffer() {
    let mut rng = StdRng::seed_from_u64(7);
    let frag = 100;
    for len in [0usize, 1, 99, 100, 101, 199, 200, 201, 1000, 1234] {
        let mut buf = Vec::new();
        begin_framed(&mut buf, "pieces").expect("name");
        buf.extend((0..len).map(|i| (i * 31 % 251) as u8));
        let message = buf[HEADER_LEN..].to_vec();
        let mut one = Vec::new();
        send_framed(&buf, frag, &mut || 42, |parts| {
            one.push(parts.iter().flat_map(|p| p.iter().copied()).collect::<Vec<u8>>());
            Ok::<(), ()>(())
        })
        .expect("framed");
        for _ in 0..20 {
            let n = rng.random_range(1..=MAX_PIECES);
            let mut cuts: Vec<usize> = (0..n - 1).map(|_| rng.random_range(0..=message.len())).collect();
            cuts.sort_unstable();
            let mut pieces: Vec<&[u8]> = Vec::new();
            let mut at = 0;
            for c in cuts.into_iter().chain([message.len()]) {
                pieces.push(&message[at..c]);
                at = c;
            }
            let mut out = Vec::new();
            send_framed_pieces(&pieces, frag, &mut || 42, |parts| {
                assert!(parts.len() <= MAX_PIECES + 1, "{} slices", parts.len());
                out.push(parts.iter().flat_map(|p| p.iter().copied()).collect::<Vec<u8>>());
                Ok::<(), ()>(())
            })
            .expect("framed");
            assert_eq!(out, one, "{len} bytes in {n} pieces");
        }
    }
    let five: [&[u8]; 5] = [b"a"; 5];
    assert!(matches!(
        send_framed_pieces(&five, frag, &mut || 1, |_| Ok::<(), ()>(())),
        Err(SendFramedError::Encode(EncodeError::TooManyPieces { pieces: 5 }))
    ));
}

/// Receiving in place (`next_fragment_target`, then `commit_in_place` or `undo_in_place`, as the UDP receiver does
/// it) gives exactly what pushing every datagram gives: the same messages in the same order, the same counters and
/// bytes held, for random interleavings of two senders' messages with fragments out of order, repeated, the info
/// late, and a datagram of garbage.
#[test]
fn receiving_in_place_is_the_same_as_pushing() {
    let mut rng = StdRng::seed_from_u64(21);
    let (mut commits, mut undos) = (0, 0);
    for round in 0..200 {
        let mut seq: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        for (m, sender) in [(0, 1u16), (1, 2), (2, 1), (3, 2)] {
            let len = rng.random_range(0..700);
            let payload: Vec<u8> = (0..len).map(|i| (i * 3 + m) as u8).collect();
            let d = encode_message("inplace", &payload, 100, &mut || m).unwrap();
            let at = seq.len();
            for dg in d {
                // Mostly in order, sometimes swapped with an earlier one of the round, sometimes twice.
                let i = if rng.random_range(0..6) == 0 {
                    rng.random_range(at.min(seq.len())..=seq.len())
                } else {
                    seq.len()
                };
                if rng.random_range(0..15) == 0 {
                    seq.push((addr(sender), dg.clone()));
                }
                seq.insert(i, (addr(sender), dg));
            }
        }
        let garbage_at = rng.random_range(0..=seq.len());
        seq.insert(garbage_at, (addr(1), vec![0xEE; 40]));
        let now = Instant::now();
        let mut pushed = Reassembler::new(ReassemblyConfig::default());
        let mut want = Vec::new();
        for (from, dg) in &seq {
            if let Ok(Some(m)) = pushed.push(now, *from, dg) {
                want.push(m.into_owned());
            }
        }
        let mut placed = Reassembler::new(ReassemblyConfig::default());
        let mut got = Vec::new();
        let mut expected: Option<(SocketAddr, i32)> = None;
        for (from, dg) in &seq {
            let target = expected
                .and_then(|(f, id)| placed.next_fragment_target(now, f, id).map(|(i, room, t)| (f, id, i, room, t)));
            let mut result = None;
            if let Some((f, id, index, room, target)) = target {
                // What recvmsg scattered would do: the header aside, up to `room` bytes appended, the rest spilled.
                let keep = target.len();
                let body = dg.get(HEADER_LEN..).unwrap_or(&[]);
                let in_target = body.len().min(room);
                target.extend_from_slice(&body[..in_target]);
                let head: Option<&[u8; HEADER_LEN]> = dg.first_chunk();
                let fits = *from == f
                    && dg.len() == HEADER_LEN + in_target
                    && head.and_then(|h| DatagramHeader::parse_head(h).ok()).is_some_and(|h| {
                        h.kind == DatagramKind::Fragment && h.id == id && h.num == index && h.len as usize == in_target
                    });
                if fits {
                    commits += 1;
                    result = Some(placed.commit_in_place(f, id, index, in_target, |_| true).map(|m| m.map(Cow::Owned)));
                } else {
                    undos += 1;
                    let mut d = dg[..dg.len().min(HEADER_LEN)].to_vec();
                    placed.undo_in_place(f, id, keep, &mut d);
                    d.extend_from_slice(&body[in_target..]);
                    assert_eq!(&d, dg, "the datagram gathered back whole");
                }
            }
            let r = match result {
                Some(r) => r,
                None => placed.push(now, *from, dg),
            };
            if let Ok(Some(m)) = r {
                got.push(m.into_owned());
            }
            expected = match DatagramHeader::parse(dg) {
                Ok((h, _)) if h.kind != DatagramKind::Whole => Some((*from, h.id)),
                _ => None,
            };
        }
        assert_eq!(got, want, "round {round}");
        assert_eq!(placed.counters(), pushed.counters(), "round {round}");
        assert_eq!(placed.buffered_bytes(), pushed.buffered_bytes(), "round {round}");
        assert_eq!(placed.in_flight(), pushed.in_flight(), "round {round}");
    }
    assert!(commits > 500 && undos > 100, "both paths taken: {commits} in place, {undos} not");
}

/// A delivered message's buffer handed back is reused for the next message that fits in it (no fresh memory); at
/// most `SPARE_BUFFERS` are kept, and none too small or too large to be worth it.
#[test]
fn recycled_buffers_are_reused_and_bounded() {
    use super::reassembly::{SPARE_BUFFERS, SPARE_MAX_BYTES, SPARE_MIN_BYTES};
    let now = Instant::now();
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let message = |r: &mut Reassembler, len: usize, id: i32| {
        let payload: Vec<u8> = (0..len).map(|i| (i * 5 + id as usize) as u8).collect();
        let out = feed(r, now, addr(1), &encode_message("recycle", &payload, 60_000, &mut || id).unwrap());
        assert_eq!(out.len(), 1);
        assert_eq!(split_name(&out[0]).unwrap().1, &payload[..]);
        out.into_iter().next().unwrap()
    };
    let first = message(&mut r, 300_000, 1);
    let (ptr, cap) = (first.as_ptr(), first.capacity());
    r.recycle(first);
    let second = message(&mut r, 200_000, 2);
    assert_eq!((second.as_ptr(), second.capacity()), (ptr, cap), "the next message that fits reuses the buffer");
    // A larger one does not fit: fresh memory, the spare buffer stays for later.
    r.recycle(second);
    let third = message(&mut r, 400_000, 3);
    assert_ne!(third.as_ptr(), ptr);
    for _ in 0..SPARE_BUFFERS + 2 {
        r.recycle(Vec::with_capacity(SPARE_MIN_BYTES * 2));
    }
    r.recycle(Vec::with_capacity(SPARE_MIN_BYTES - 1));
    r.recycle(Vec::with_capacity(SPARE_MAX_BYTES + 1));
    assert_eq!(r.spare_buffers(), SPARE_BUFFERS, "bounded");
}

/// Spare buffers keep the largest within their count and byte bounds: buffers too small for the messages that come
/// now (kept from smaller ones before) give way to larger ones, which the next large message then reuses.
#[test]
fn spare_buffers_keep_the_largest_within_their_bounds() {
    use super::reassembly::{SPARE_BUFFERS, SPARE_BYTES, SPARE_MIN_BYTES, keep_spare, take_spare};
    let mut spare = Vec::new();
    for _ in 0..SPARE_BUFFERS {
        keep_spare(&mut spare, Vec::with_capacity(SPARE_MIN_BYTES));
    }
    assert_eq!(spare.len(), SPARE_BUFFERS);
    assert!(take_spare(&mut spare, 1 << 20).is_none(), "none holds 1 MiB");
    let big = Vec::<u8>::with_capacity(1 << 20);
    let ptr = big.as_ptr();
    keep_spare(&mut spare, big);
    assert_eq!(spare.len(), SPARE_BUFFERS, "a small one gave way");
    let got = take_spare(&mut spare, (1 << 20) - 10).expect("the large one is kept");
    assert_eq!(got.as_ptr(), ptr);
    // A small message takes the smallest buffer that fits, not the large one.
    keep_spare(&mut spare, got);
    let small = take_spare(&mut spare, SPARE_MIN_BYTES).expect("a small one fits");
    assert_eq!(small.capacity(), SPARE_MIN_BYTES);
    // Many large ones: no more bytes than SPARE_BYTES, the largest kept.
    let mut spare = Vec::new();
    for i in 0..20 {
        keep_spare(&mut spare, Vec::with_capacity((1 << 20) + i * 4096));
    }
    let total: usize = spare.iter().map(Vec::capacity).sum();
    assert!(total <= SPARE_BYTES && spare.len() <= SPARE_BUFFERS, "{total} bytes in {} buffers", spare.len());
    assert!(spare.len() >= SPARE_BYTES / (2 << 20), "{} kept", spare.len());
    assert!(spare.iter().all(|b| b.capacity() >= (1 << 20) + 10 * 4096), "the largest are kept");
}

/// A message given up (its missing fragments were dropped by the kernel) frees what it held into the spare buffers,
/// its later datagrams are dropped unstored and counted, and the sender's next message is reassembled as usual.
#[test]
fn an_abandoned_message_is_dropped_and_its_later_fragments_are_not_stored() {
    let now = Instant::now();
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let d = encode_message("abandon", &payload, 60_000, &mut || 41).unwrap();
    assert_eq!(d.len(), 1 + 4, "an info datagram and four fragments");
    assert!(feed(&mut r, now, addr(1), &d[..3]).is_empty());
    assert!(r.buffered_bytes() > 0);
    assert!(!r.abandon(addr(1), 42), "not held");
    assert!(!r.abandon(addr(2), 41), "not held from that sender");
    assert!(r.abandon(addr(1), 41));
    assert_eq!((r.in_flight(), r.buffered_bytes(), r.spare_buffers()), (0, 0, 1), "its buffer kept spare");
    let before = r.counters().datagrams;
    // Its last fragments: counted, not stored, no new entry.
    assert!(feed(&mut r, now, addr(1), &d[3..]).is_empty());
    assert_eq!(r.counters().datagrams, before + 2);
    assert_eq!(r.in_flight(), 0, "nothing held for it");
    assert_eq!(r.counters().abandoned, 1);
    // The next message reuses its buffer and arrives intact.
    let next = encode_message("abandon", &payload, 60_000, &mut || 43).unwrap();
    let out = feed(&mut r, now, addr(1), &next);
    assert_eq!(out.len(), 1);
    assert_eq!(split_name(&out[0]).unwrap().1, &payload[..]);
    assert_eq!(r.spare_buffers(), 0, "taken");
    // A new message that reuses the abandoned one's id starts with its info datagram: reassembled as usual.
    let again = encode_message("abandon", &payload, 60_000, &mut || 41).unwrap();
    let out = feed(&mut r, now, addr(1), &again);
    assert_eq!(out.len(), 1, "the id is free again after an info datagram");
    assert_eq!(split_name(&out[0]).unwrap().1, &payload[..]);
}
