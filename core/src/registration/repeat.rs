//! Recognising a repeated registration before decoding it.
//!
//! Every process registers itself and each of its publishers and subscribers again every refresh (1 s), and every
//! process of the host receives all of it, so in the steady state almost every sample a registrar receives says
//! what the one before it from the same sender said, but for its registration clock. Decoding such a sample
//! allocates a string per field and walks the registry to come to "nothing changed". A [`Fingerprint`] is taken
//! from the sample's bytes instead, without allocating: a keyed hash of every field but the body's registration
//! clock, and the clock. A registry entry remembers the fingerprint (and the sender and whether the sample was
//! sealed) of the sample it was last made from; a sample with the same [`RepeatKey`] only refreshes that entry's
//! expiry and clock.
//!
//! Only publisher, subscriber and process registrations (cmd 2, 3, 4) with exactly one body are fingerprinted;
//! anything else (unregistrations, services, a body given twice, which the decoder would merge, malformed bytes)
//! takes the decoding path, which counts and applies it as before.

use super::pbwalk::next_field;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;

use crate::wire::pb;

/// Which registry a fingerprinted sample refreshes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Body {
    /// A publisher (cmd 2) or subscriber (cmd 3).
    Topic,
    /// A process (cmd 4).
    Process,
}

/// A registration sample's identity for repeat recognition, taken from its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fingerprint {
    /// The registry it refreshes.
    pub body: Body,
    /// The body's registration clock (the one field left out of `hash`), as the decoder would read it.
    pub clock: i32,
    /// Keyed hash of every other field of the sample.
    pub hash: u64,
}

/// What makes a received sample a repeat of the one an entry was made from: the same fingerprint from the same
/// sending address, sealed or not alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct RepeatKey {
    pub source: SocketAddr,
    pub hash: u64,
    pub authenticated: bool,
}

/// Sample fields: 1 cmd_type, 3 process, 4 service, 5 topic, 7 client.
const CMD_TYPE: u64 = 1;
const PROCESS: u64 = 3;
const SERVICE: u64 = 4;
const TOPIC: u64 = 5;
const CLIENT: u64 = 7;
/// The registration clock is field 1 of every body (Process, Topic, Service, Client).
const REGISTRATION_CLOCK: u64 = 1;

/// The fingerprint of a registration sample's protobuf bytes (`eCAL.pb.Sample`, the framing's name removed), or
/// `None` when it is not one repeat recognition handles (see the module's doc). `keys` keys the hash (a
/// `RandomState` per registrar: what a peer sends cannot be made to collide on purpose).
pub(super) fn fingerprint(sample: &[u8], keys: &impl BuildHasher) -> Option<Fingerprint> {
    let mut h = keys.build_hasher();
    let mut buf = sample;
    let mut cmd = None;
    let mut found: Option<(Body, i32)> = None;
    while let Some(field) = next_field(&mut buf) {
        let f = field?;
        match f.number {
            SERVICE | CLIENT => return None,
            PROCESS | TOPIC => {
                // A body given twice is merged by the decoder: left to it.
                if found.is_some() || f.wire_type != 2 {
                    return None;
                }
                let body = if f.number == TOPIC { Body::Topic } else { Body::Process };
                // The field's key, then the body's fields without the clock, then how many bytes those were (so
                // that the fields after the body cannot be read as part of it).
                h.write(&f.raw[..f.raw.len() - f.payload.len()]);
                let (mut inner, mut clock, mut hashed) = (f.payload, 0i32, 0usize);
                while let Some(g) = next_field(&mut inner) {
                    let g = g?;
                    if g.number == REGISTRATION_CLOCK {
                        if g.wire_type != 0 {
                            return None;
                        }
                        // int32 as prost reads it: the varint's low 32 bits.
                        clock = g.value as u32 as i32;
                    } else {
                        h.write(g.raw);
                        hashed += g.raw.len();
                    }
                }
                h.write_usize(hashed);
                found = Some((body, clock));
            }
            n => {
                if n == CMD_TYPE {
                    if f.wire_type != 0 {
                        return None;
                    }
                    cmd = Some(f.value as u32 as i32);
                }
                h.write(f.raw);
            }
        }
    }
    let (body, clock) = found?;
    let fits = match cmd? {
        pb::CMD_REG_PUBLISHER | pb::CMD_REG_SUBSCRIBER => body == Body::Topic,
        pb::CMD_REG_PROCESS => body == Body::Process,
        _ => false,
    };
    fits.then(|| Fingerprint { body, clock, hash: h.finish() })
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::RandomState;

    use prost::Message;

    use super::*;

    fn topic(clock: i32, name: &str) -> Vec<u8> {
        pb::Sample {
            cmd_type: pb::CMD_REG_PUBLISHER,
            topic: Some(pb::Topic {
                registration_clock: clock,
                host_name: "h".into(),
                process_id: 7,
                topic_id: "42".into(),
                topic_name: name.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn the_clock_is_left_out_and_every_other_field_counts() {
        let keys = RandomState::new();
        let a = fingerprint(&topic(1, "a"), &keys).expect("a topic registration");
        let b = fingerprint(&topic(2, "a"), &keys).expect("the same, one refresh later");
        assert_eq!((a.body, a.clock, b.clock), (Body::Topic, 1, 2));
        assert_eq!(a.hash, b.hash);
        assert_ne!(a.hash, fingerprint(&topic(1, "b"), &keys).unwrap().hash);
        // A negative clock reads as the decoder reads it.
        assert_eq!(fingerprint(&topic(-3, "a"), &keys).unwrap().clock, -3);
        // Another registrar's keys give other hashes.
        assert_ne!(a.hash, fingerprint(&topic(1, "a"), &RandomState::new()).unwrap().hash);
    }

    #[test]
    fn only_single_bodied_registrations_are_fingerprinted() {
        let keys = RandomState::new();
        let process = pb::Sample {
            cmd_type: pb::CMD_REG_PROCESS,
            process: Some(pb::Process { registration_clock: 5, host_name: "h".into(), ..Default::default() }),
            ..Default::default()
        };
        let fp = fingerprint(&process.encode_to_vec(), &keys).expect("a process registration");
        assert_eq!((fp.body, fp.clock), (Body::Process, 5));
        let one = topic(1, "a");
        // Twice the topic: the decoder merges them.
        assert_eq!(fingerprint(&[one.clone(), one.clone()].concat(), &keys), None);
        // An unregistration, a service, a topic body under a process command, no body, truncated bytes.
        let unreg = pb::Sample { cmd_type: pb::CMD_UNREG_PUBLISHER, ..pb::Sample::decode(one.as_slice()).unwrap() };
        assert_eq!(fingerprint(&unreg.encode_to_vec(), &keys), None);
        let service =
            pb::Sample { cmd_type: pb::CMD_REG_SERVICE, service: Some(pb::Service::default()), ..Default::default() };
        assert_eq!(fingerprint(&service.encode_to_vec(), &keys), None);
        let mixed = pb::Sample { cmd_type: pb::CMD_REG_PROCESS, ..pb::Sample::decode(one.as_slice()).unwrap() };
        assert_eq!(fingerprint(&mixed.encode_to_vec(), &keys), None);
        let empty = pb::Sample { cmd_type: pb::CMD_REG_PUBLISHER, ..Default::default() };
        assert_eq!(fingerprint(&empty.encode_to_vec(), &keys), None);
        for cut in 1..one.len() {
            assert_eq!(fingerprint(&one[..cut], &keys), None, "cut at {cut}");
        }
    }

    #[test]
    fn fields_after_the_body_are_not_read_as_part_of_it() {
        let keys = RandomState::new();
        let mut s = pb::Sample::decode(topic(1, "a").as_slice()).unwrap();
        let inside = s.encode_to_vec();
        // The same bytes moved from the body's end to after it must not fingerprint alike.
        s.topic.as_mut().unwrap().unit_name = "u".into();
        let with_unit = s.encode_to_vec();
        assert_ne!(fingerprint(&inside, &keys).unwrap().hash, fingerprint(&with_unit, &keys).unwrap().hash);
        let mut moved = inside.clone();
        // Field 8 (padding, bytes) after the body, holding what the unit name added to it.
        moved.extend_from_slice(&[8 << 3 | 2, 3]);
        moved.extend_from_slice(&with_unit[with_unit.len() - 3..]);
        assert_ne!(fingerprint(&moved, &keys).map(|f| f.hash), fingerprint(&with_unit, &keys).map(|f| f.hash));
    }
}
