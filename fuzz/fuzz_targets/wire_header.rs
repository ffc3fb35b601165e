//! `DatagramHeader::parse` and `split_name` on arbitrary bytes.
//!
//! Oracles besides "never panics":
//! - an accepted header re-serialises to the bytes it was parsed from (except the 3 reserved
//!   bytes, which eCAL does not check either), and its payload is exactly `len` bytes for types 2/3
//!   and empty for type 1;
//! - whenever `split_name` accepts a framed message, encoding that (name, payload) again with
//!   `encode_message` and reassembling the datagrams gives back the same name and payload
//!   (fragment size 1..=256 taken from the last input byte, at most 64 fragments, so
//!   fragmentation is exercised too).
#![no_main]

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use shoal::wire::{
    DatagramHeader, DatagramKind, HEADER_LEN, Reassembler, ReassemblyConfig, encode_message, framed_len, split_name,
};

fn check_header(data: &[u8]) {
    let Ok((header, payload)) = DatagramHeader::parse(data) else { return };
    let bytes = header.to_bytes();
    assert_eq!(bytes[..5], data[..5], "magic/version differ after re-serialisation");
    assert_eq!(bytes[8..HEADER_LEN], data[8..HEADER_LEN], "fields differ after re-serialisation");
    match header.kind {
        DatagramKind::FragmentInfo => assert!(payload.is_empty()),
        DatagramKind::Fragment | DatagramKind::Whole => {
            assert_eq!(payload.len(), header.len as usize);
            assert_eq!(payload, &data[HEADER_LEN..HEADER_LEN + payload.len()]);
        }
    }
    // The payload of a datagram is a framed message: its name split must not panic either.
    check_split(payload, 0);
}

fn check_split(framed: &[u8], fragment_size_byte: u8) {
    let Ok((name, payload)) = split_name(framed) else { return };
    assert!(!name.as_bytes().contains(&0), "split name contains NUL");
    assert!(2 + name.len() + payload.len() <= framed.len(), "split returned more bytes than given");
    assert!(framed.ends_with(payload), "payload is not the tail of the message");

    // Round trip through the encoder and the reassembler, in at most 64 fragments (more only
    // repeat the same code and slow the fuzzer down).
    let total = framed_len(name, payload.len());
    let max_fragment_payload = (usize::from(fragment_size_byte) + 1).max(total.div_ceil(64));
    let mut next_id = 7;
    let datagrams = encode_message(name, payload, max_fragment_payload, &mut || {
        next_id += 1;
        next_id
    })
    .expect("a name that split_name returned must be encodable");
    assert!(datagrams.len() <= 65, "{} datagrams", datagrams.len());
    let mut reassembler = Reassembler::new(ReassemblyConfig::default());
    let from = SocketAddr::from(([127, 0, 0, 1], 14000));
    let now = Instant::now();
    let mut complete: Option<Vec<u8>> = None;
    for (i, d) in datagrams.iter().enumerate() {
        assert!(complete.is_none(), "message completed before its last datagram");
        match reassembler.push(now, from, d) {
            Ok(Some(Cow::Borrowed(m))) => complete = Some(m.to_vec()),
            Ok(Some(Cow::Owned(m))) => complete = Some(m),
            Ok(None) => {}
            Err(e) => panic!("datagram {i} of {} of our own encoding rejected: {e}", datagrams.len()),
        }
    }
    let message = complete.expect("reassembly of our own datagrams did not complete");
    assert_eq!(message.len(), total);
    let (name2, payload2) = split_name(&message).expect("re-encoded message must split");
    assert_eq!(name2, name);
    assert_eq!(payload2, payload);
    assert_eq!(reassembler.in_flight(), 0);
    assert_eq!(reassembler.buffered_bytes(), 0);
}

fuzz_target!(|data: &[u8]| {
    check_header(data);
    check_split(data, data.last().copied().unwrap_or(0));
});
