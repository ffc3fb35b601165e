//! `decode_registration` on arbitrary bytes, and a `Registrar` driven by a sequence of received
//! datagrams.
//!
//! Input format (written by `seedgen`): a sequence of records `[flags u8][len u16 LE][len bytes]`
//! (a short last record takes what is left). `flags` bit 0 set: the bytes are a raw UDP datagram;
//! clear: they are a framed registration message, sent as one whole (type 3) datagram. Bits 1..=7:
//! time advanced before the record, in units of 100 ms (so remote entries also expire).
//!
//! Oracles besides "never panics":
//! - a decoded sample re-encodes to bytes that decode to the same encoding (prost round trip);
//! - every record's bytes are also decoded as a framed message on their own;
//! - the registry holds at most one entry per applied sample; every datagram the registrar
//!   sends parses as an ecaludp header;
//! - the event stream is consistent: `Matched` only for a pair not matched yet, `Updated` and
//!   `Unmatched` only for a matched pair, and the pairs agree with `matches_of`;
//! - `timeout` after the last record every remote entry has expired and every match has ended.
#![no_main]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use shoal::Config;
use shoal::TypeInfo;
use shoal::registration::{
    EntityKey, Event, Identity, Layer, LayerKind, LayerPar, LocalTopic, Registrar, decode_registration,
};
use shoal::wire::pb;
use shoal::wire::{DatagramHeader, MAX_DATAGRAM_LEN};

/// Identity of the fuzzed registrar (the seeds use the same host so their samples are accepted).
const HOST: &str = "fuzzhost";
/// Our pid (seeds use it for "own process" samples).
const PID: u32 = 4242;
/// Local entities: (id, is publisher, topic).
const LOCALS: [(u64, bool, &str); 3] = [(1, true, "fuzz_topic"), (2, false, "fuzz_topic"), (3, false, "other")];

fn records(mut data: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    while let Some((&flags, rest)) = data.split_first() {
        let (len, rest) = match rest.split_first_chunk::<2>() {
            Some((len, rest)) => (usize::from(u16::from_le_bytes(*len)), rest),
            None => (rest.len(), rest),
        };
        let (record, rest) = rest.split_at(len.min(rest.len()));
        out.push((flags, record));
        data = rest;
    }
    out
}

fn check_decode(bytes: &[u8]) {
    let Ok(sample) = decode_registration(bytes) else { return };
    let encoded = prost::Message::encode_to_vec(&sample);
    let again: pb::Sample = prost::Message::decode(encoded.as_slice()).expect("re-encoded sample must decode");
    assert_eq!(prost::Message::encode_to_vec(&again), encoded, "prost round trip changed the sample");
}

fn local_topic(id: u64, topic: &str) -> LocalTopic {
    LocalTopic {
        id,
        topic_name: topic.to_owned(),
        type_info: TypeInfo::raw("fuzz.Bytes"),
        layers: vec![Layer::new(LayerKind::Udp, true, true, LayerPar::None)],
        stats: Default::default(),
    }
}

struct Tracker {
    matched: BTreeSet<(u64, EntityKey)>,
}

impl Tracker {
    fn drain(&mut self, reg: &mut Registrar) {
        while let Some(event) = reg.poll_event() {
            match event {
                Event::Matched { local_id, remote } => {
                    assert!(self.matched.insert((local_id, remote.key.clone())), "matched twice: {remote:?}");
                }
                Event::Updated { local_id, remote } => {
                    assert!(self.matched.contains(&(local_id, remote.key.clone())), "update of unmatched pair");
                }
                Event::Unmatched { local_id, remote } => {
                    assert!(self.matched.remove(&(local_id, remote.clone())), "unmatch of unmatched pair");
                }
            }
        }
        for (id, _, _) in LOCALS {
            let actual: BTreeSet<&EntityKey> = reg.matches_of(id).collect();
            let tracked: BTreeSet<&EntityKey> = self.matched.iter().filter(|(l, _)| *l == id).map(|(_, k)| k).collect();
            assert_eq!(actual, tracked, "events disagree with matches_of({id})");
        }
        while let Some(d) = reg.poll_transmit() {
            assert!(d.len() <= MAX_DATAGRAM_LEN, "sent a datagram of {} bytes", d.len());
            DatagramHeader::parse(&d).expect("sent datagram must parse");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check_decode(data);

    let cfg = Config::default().registration;
    let identity = Identity {
        host_name: HOST.to_owned(),
        pid: PID,
        process_name: "/usr/bin/fuzz".to_owned(),
        unit_name: "fuzz".to_owned(),
        process_parameter: String::new(),
        shm_transport_domain: String::new(),
        network_mode: false,
    };
    let start = Instant::now();
    let mut now = start;
    let mut reg = Registrar::new(identity, &cfg, now);
    for (id, publisher, topic) in LOCALS {
        if publisher {
            reg.add_publisher(now, local_topic(id, topic));
        } else {
            reg.add_subscriber(now, local_topic(id, topic));
        }
    }
    let mut tracker = Tracker { matched: BTreeSet::new() };
    tracker.drain(&mut reg);
    let from = SocketAddr::from(([127, 0, 0, 1], 14000));

    for (flags, bytes) in records(data) {
        now += Duration::from_millis(100 * u64::from(flags >> 1));
        if reg.poll_timeout().is_some_and(|t| t <= now) {
            reg.handle_timeout(now);
        }
        check_decode(bytes);
        if flags & 1 == 1 {
            reg.handle_datagram(now, from, bytes);
        } else {
            // A framed message: send its bytes as one whole datagram (name prefix included).
            let mut d = DatagramHeader::whole(bytes.len() as u32).to_bytes().to_vec();
            d.extend_from_slice(bytes);
            reg.handle_datagram(now, from, &d);
        }
        tracker.drain(&mut reg);
        let entries = reg.processes().count() + reg.topics().count();
        assert!(
            entries as u64 <= reg.counters().samples_applied,
            "{entries} registry entries from {} applied samples",
            reg.counters().samples_applied
        );
    }

    // One timeout after the last record, every remote entry is gone.
    now += cfg.timeout;
    reg.handle_timeout(now);
    tracker.drain(&mut reg);
    assert_eq!(reg.topics().count(), 0, "remote topics survived their timeout");
    assert_eq!(reg.processes().count(), 0, "remote processes survived their timeout");
    assert!(tracker.matched.is_empty(), "matches survived the expiry of their remote: {:?}", tracker.matched);

    reg.shutdown(now);
    tracker.drain(&mut reg);
    assert!(reg.poll_timeout().is_none());
});
