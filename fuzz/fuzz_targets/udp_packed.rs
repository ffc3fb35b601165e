//! `wire::packed::PackedDatagram::parse` (shoal's packed UDP data datagram) on arbitrary bytes.
//!
//! Oracles besides "never panics":
//! - a datagram that parses is made only of its header, name and records: written again record by record with
//!   `begin_packed` and `append_records` it is the same bytes;
//! - `records()` yields exactly `count()` records;
//! - bytes that do not start with the magic never parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal::wire::packed::{PackedDatagram, append_records, begin_packed, count_of, is_packed, records_of};

fuzz_target!(|data: &[u8]| {
    let parsed = PackedDatagram::parse(data);
    if !is_packed(data) {
        assert!(parsed.is_err(), "parsed without the magic");
    }
    let Ok(p) = parsed else { return };
    let records: Vec<_> = p.records().collect();
    assert_eq!(records.len(), p.count());
    let mut buf = Vec::new();
    let first = records[0];
    begin_packed(&mut buf, p.publisher_id, p.topic, first.clock, first.time_us, first.payload)
        .expect("a parsed topic and payload can be packed");
    for r in &records[1..] {
        let mut one = Vec::new();
        begin_packed(&mut one, p.publisher_id, p.topic, r.clock, r.time_us, r.payload).expect("packable");
        assert!(append_records(&mut buf, records_of(&one), count_of(&one)), "within MAX_RECORDS");
    }
    assert_eq!(buf, data, "re-encoded packed datagram differs");
});
