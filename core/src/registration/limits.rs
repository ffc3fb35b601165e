//! Bounds checked on a registration sample's bytes before it is decoded: decoding allocates per entry, so a 4 MiB
//! sample of 2-byte empty transport-layer entries would cost hundreds of MB if it were decoded first. The check
//! walks the protobuf wire format (no allocation) and looks at the repeated and variable-length fields shoal
//! stores: transport layers, names, descriptors, memfile lists, and shoal's statistics.

use super::pbwalk::next_field;
use crate::config::LimitsConfig;

/// What a sample exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// More transport layer entries than `layers_per_topic`.
    #[error("{count} transport layer entries (at most {limit})")]
    Layers {
        /// Entries found (counting stops just past the limit).
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A text field longer than `string_bytes`.
    #[error("a text field of {len} bytes (at most {limit})")]
    String {
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// A descriptor larger than `descriptor_bytes`.
    #[error("a type descriptor of {len} bytes (at most {limit})")]
    Descriptor {
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// More entries in a list than shoal keeps (memfile names, statistics connections or buckets, methods).
    #[error("a list of more than {limit} entries")]
    List {
        /// The limit.
        limit: usize,
    },
    /// The bytes are not a well-formed protobuf message (the decoder would reject them too).
    #[error("malformed protobuf")]
    Malformed,
}

/// Memfile names of one eCAL shm layer entry (eCAL uses 1 to a few).
const MAX_MEMFILES: usize = 64;

/// One field of a protobuf message: its number and, for length-delimited fields, the bytes.
struct Field<'a> {
    number: u64,
    bytes: Option<&'a [u8]>,
}

/// The fields of one message, in order; stops with `Err` on malformed input.
struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, LimitError>;

    fn next(&mut self) -> Option<Self::Item> {
        match next_field(&mut self.buf)? {
            Some(f) => Some(Ok(Field { number: f.number, bytes: (f.wire_type == 2).then_some(f.payload) })),
            None => {
                self.buf = &[];
                Some(Err(LimitError::Malformed))
            }
        }
    }
}

fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf }
}

fn string(len: usize, l: &LimitsConfig) -> Result<(), LimitError> {
    if len > l.string_bytes { Err(LimitError::String { len, limit: l.string_bytes }) } else { Ok(()) }
}

/// Every length-delimited field of `msg` is text within `string_bytes`, except those `nested` names, which are
/// checked by `check_nested`.
fn texts(
    msg: &[u8],
    l: &LimitsConfig,
    nested: &[u64],
    mut check_nested: impl FnMut(u64, &[u8]) -> Result<(), LimitError>,
) -> Result<(), LimitError> {
    for f in fields(msg) {
        let f = f?;
        if let Some(bytes) = f.bytes {
            if nested.contains(&f.number) {
                check_nested(f.number, bytes)?;
            } else {
                string(bytes.len(), l)?;
            }
        }
    }
    Ok(())
}

/// Checks an `eCAL.pb.Sample` (registration) against the limits.
pub fn check_sample(sample: &[u8], l: &LimitsConfig) -> Result<(), LimitError> {
    // A message field given several times is merged by the decoder (its repeated fields concatenated), so the layers
    // are counted over every occurrence of the topic.
    let mut layers = 0usize;
    // Methods are counted over every occurrence of the service or client, as layers are.
    let mut methods = 0usize;
    // Sample: 3 process, 4 service, 5 topic, 6 content (data samples), 7 client, 8 padding.
    texts(sample, l, &[3, 4, 5, 6, 7, 8], |n, b| match n {
        3 => check_process(b, l),
        // Service: 8 methods; Client: 9 methods.
        4 => check_service(b, l, 8, &mut methods),
        7 => check_service(b, l, 9, &mut methods),
        5 => check_topic(b, l, &mut layers),
        // A registration has no content; padding is skipped by the decoder.
        _ => Ok(()),
    })
}

/// Methods of one service or client shoal keeps.
pub const MAX_METHODS: usize = 256;

fn descriptor(desc: &[u8], l: &LimitsConfig) -> Result<(), LimitError> {
    if desc.len() > l.descriptor_bytes {
        Err(LimitError::Descriptor { len: desc.len(), limit: l.descriptor_bytes })
    } else {
        Ok(())
    }
}

/// Checks one occurrence of a service (its methods in field `methods_field`); `methods` counts over occurrences.
fn check_service(s: &[u8], l: &LimitsConfig, methods_field: u64, methods: &mut usize) -> Result<(), LimitError> {
    texts(s, l, &[methods_field], |_, m| {
        *methods += 1;
        if *methods > MAX_METHODS {
            return Err(LimitError::List { limit: MAX_METHODS });
        }
        // Method: 5 req_desc, 6 resp_desc (deprecated descriptors), 7 / 8 request / response type information.
        texts(m, l, &[5, 6, 7, 8], |n, b| match n {
            5 | 6 => descriptor(b, l),
            _ => texts(b, l, &[3], |_, desc| descriptor(desc, l)),
        })
    })
}

fn check_process(p: &[u8], l: &LimitsConfig) -> Result<(), LimitError> {
    // Process: 12 state (severity, info, level).
    texts(p, l, &[12], |_, state| texts(state, l, &[], |_, _| Ok(())))
}

/// Checks one occurrence of the topic; `layers` counts the transport layers of all occurrences so far.
fn check_topic(t: &[u8], l: &LimitsConfig, layers: &mut usize) -> Result<(), LimitError> {
    // Topic: 12 transport_layer, 30 datatype_information, 31 data_latency_us, 100 shoal_stats.
    texts(t, l, &[12, 30, 31, 100], |n, b| match n {
        12 => {
            *layers += 1;
            if *layers > l.layers_per_topic {
                return Err(LimitError::Layers { count: *layers, limit: l.layers_per_topic });
            }
            check_layer(b, l)
        }
        30 => texts(b, l, &[3], |_, desc| descriptor(desc, l)),
        31 => fields(b).try_for_each(|f| f.map(|_| ())),
        _ => check_shoal_stats(b),
    })
}

fn check_layer(layer: &[u8], l: &LimitsConfig) -> Result<(), LimitError> {
    // Memory files are counted over every occurrence of par_layer and of its shm parameters (merged when decoded).
    let mut files = 0;
    // TransportLayer: 5 par_layer (ConnectionPar: 1 shm {1 memory_file_list}, 3 tcp, 100 shoal).
    texts(layer, l, &[5], |_, par| {
        texts(par, l, &[1, 3, 100], |n, b| {
            if n != 1 {
                return texts(b, l, &[], |_, _| Ok(()));
            }
            texts(b, l, &[], |_, _| Ok(()))?;
            for f in fields(b) {
                files += usize::from(f?.number == 1);
                if files > MAX_MEMFILES {
                    return Err(LimitError::List { limit: MAX_MEMFILES });
                }
            }
            Ok(())
        })
    })
}

fn check_shoal_stats(s: &[u8]) -> Result<(), LimitError> {
    let max = super::codec::MAX_CONNECTIONS;
    let mut connections = 0;
    for f in fields(s) {
        let f = f?;
        if f.number == 3 {
            connections += 1;
            if connections > max {
                return Err(LimitError::List { limit: max });
            }
            // Bucket lists (packed) are at most one entry per byte; a histogram has LATENCY_BUCKETS.
            for c in fields(f.bytes.unwrap_or_default()) {
                let c = c?;
                if let Some(b) = c.bytes
                    && (c.number == 11 || c.number == 12)
                    && b.len() > 5 * crate::stats::LATENCY_BUCKETS
                {
                    return Err(LimitError::List { limit: crate::stats::LATENCY_BUCKETS });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::wire::pb;

    fn topic_sample(layers: usize, name: &str, descriptor: usize) -> Vec<u8> {
        pb::Sample {
            cmd_type: pb::CMD_REG_PUBLISHER,
            topic: Some(pb::Topic {
                topic_name: name.into(),
                transport_layer: vec![pb::TransportLayer::default(); layers],
                datatype_information: Some(pb::DataTypeInformation {
                    name: "t".into(),
                    encoding: "proto".into(),
                    descriptor_information: vec![0; descriptor],
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// The decoder merges a topic given twice (its layers concatenated): the layers are counted over both (found by
    /// the `registration_limits` fuzz target).
    #[test]
    fn layers_are_counted_over_every_occurrence_of_the_topic() {
        let l = LimitsConfig { layers_per_topic: 4, ..LimitsConfig::default() };
        let one = topic_sample(3, "t", 0);
        assert_eq!(check_sample(&one, &l), Ok(()));
        let twice = [one.clone(), one].concat();
        assert_eq!(
            pb::Sample::decode(twice.as_slice()).expect("merged").topic.expect("topic").transport_layer.len(),
            6
        );
        assert_eq!(check_sample(&twice, &l), Err(LimitError::Layers { count: 5, limit: 4 }));
    }

    #[test]
    fn samples_within_the_limits_pass_and_each_bound_is_enforced() {
        let l = LimitsConfig::default();
        assert_eq!(check_sample(&topic_sample(3, "t", 1000), &l), Ok(()));
        assert_eq!(check_sample(&topic_sample(17, "t", 0), &l), Err(LimitError::Layers { count: 17, limit: 16 }));
        assert_eq!(
            check_sample(&topic_sample(1, &"x".repeat(5000), 0), &l),
            Err(LimitError::String { len: 5000, limit: 4096 })
        );
        assert_eq!(
            check_sample(&topic_sample(1, "t", (1 << 20) + 1), &l),
            Err(LimitError::Descriptor { len: (1 << 20) + 1, limit: 1 << 20 })
        );
        let mut process = pb::Sample {
            cmd_type: pb::CMD_REG_PROCESS,
            process: Some(pb::Process { unit_name: "u".repeat(5000), ..Default::default() }),
            ..Default::default()
        };
        assert!(matches!(check_sample(&process.encode_to_vec(), &l), Err(LimitError::String { .. })));
        process.process.as_mut().unwrap().unit_name = "u".into();
        assert_eq!(check_sample(&process.encode_to_vec(), &l), Ok(()));
    }

    #[test]
    fn a_flood_of_empty_layers_is_refused_without_decoding() {
        // What an attacker sent: ~64 KB of 2-byte empty layer entries (field 12, length 0).
        let mut topic = Vec::new();
        for _ in 0..30_000 {
            topic.extend_from_slice(&[12 << 3 | 2, 0]);
        }
        let mut sample = vec![1 << 3, 2, 5 << 3 | 2];
        let mut len = topic.len();
        while len >= 0x80 {
            sample.push((len as u8) | 0x80);
            len >>= 7;
        }
        sample.push(len as u8);
        sample.extend_from_slice(&topic);
        assert!(matches!(check_sample(&sample, &LimitsConfig::default()), Err(LimitError::Layers { .. })));
    }

    #[test]
    fn malformed_bytes_are_reported_not_panicked_on() {
        let l = LimitsConfig::default();
        for bad in [&[0x2a][..], &[0x2a, 0x05, 1], &[0xff; 11], &[0x2b]] {
            assert_eq!(check_sample(bad, &l), Err(LimitError::Malformed), "{bad:?}");
        }
    }
}
