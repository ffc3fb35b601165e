//! `registration::limits::check_sample`, the bounds checked on a registration sample's bytes before it is decoded,
//! against the decoder itself.
//!
//! Input: `[string_bytes u8][layers u8][descriptor u8][sample bytes…]`: the first three bytes pick small limits
//! (so that the fuzzer reaches them), the rest is an `eCAL.pb.Sample` as it arrives on the wire.
//!
//! Oracles besides "never panics":
//! - whenever the check passes and prost decodes the bytes, the decoded sample obeys the limits: every text field
//!   of the process and the topic within `string_bytes`, at most `layers_per_topic` transport layers, a descriptor
//!   within `descriptor_bytes`;
//! - the check is monotonic: what passes with these limits passes with the defaults (which are all larger).
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use shoal::config::LimitsConfig;
use shoal::registration::limits::check_sample;
use shoal::wire::pb;

fuzz_target!(|data: &[u8]| {
    let Some((&[s, layers, d], sample)) = data.split_first_chunk::<3>() else { return };
    // `LimitsConfig` is `#[non_exhaustive]`: the defaults, then the bounds under test.
    let mut limits = LimitsConfig::default();
    limits.string_bytes = usize::from(s % 64);
    limits.layers_per_topic = usize::from(layers % 8);
    limits.descriptor_bytes = usize::from(d) * 4;
    let Ok(()) = check_sample(sample, &limits) else { return };
    assert!(check_sample(sample, &LimitsConfig::default()).is_ok(), "passes small limits but not the defaults");
    let Ok(decoded) = pb::Sample::decode(sample) else { return };
    let text = |what: &str, v: &str| {
        assert!(v.len() <= limits.string_bytes, "{what} of {} bytes passed a limit of {}", v.len(), limits.string_bytes)
    };
    if let Some(p) = &decoded.process {
        for (what, v) in [
            ("host_name", &p.host_name),
            ("process_name", &p.process_name),
            ("unit_name", &p.unit_name),
            ("process_parameter", &p.process_parameter),
            ("ecal_runtime_version", &p.ecal_runtime_version),
        ] {
            text(what, v);
        }
    }
    if let Some(t) = &decoded.topic {
        for (what, v) in [
            ("host_name", &t.host_name),
            ("process_name", &t.process_name),
            ("unit_name", &t.unit_name),
            ("topic_id", &t.topic_id),
            ("topic_name", &t.topic_name),
            ("direction", &t.direction),
            ("shm_transport_domain", &t.shm_transport_domain),
        ] {
            text(what, v);
        }
        assert!(t.transport_layer.len() <= limits.layers_per_topic, "{} layers passed", t.transport_layer.len());
        if let Some(dt) = &t.datatype_information {
            text("type name", &dt.name);
            text("encoding", &dt.encoding);
            assert!(dt.descriptor_information.len() <= limits.descriptor_bytes, "descriptor over its limit passed");
        }
    }
});
