//! `decode_data_sample` (eCAL UDP data `Sample`) on arbitrary bytes.
//!
//! Oracle besides "never panics": a decoded sample, encoded again with `encode_data_sample`, decodes to the same
//! sample (topic, publisher id, host, clock, time, payload).
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal::wire::data_sample::{DataSampleRef, decode_data_sample, encode_data_sample};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = decode_data_sample(data) else { return };
    let id = s.publisher_id.to_string();
    let mut buf = Vec::new();
    encode_data_sample(
        &mut buf,
        &DataSampleRef {
            topic_name: &s.topic_name,
            topic_id: &id,
            publisher_id: s.publisher_id,
            host_name: &s.host_name,
            clock: s.clock,
            time_us: s.time_us,
            payload: &s.payload,
        },
    );
    let back = decode_data_sample(&buf).expect("our own encoding decodes");
    assert_eq!(
        (&back.topic_name, back.publisher_id, &back.host_name, back.clock, back.time_us, &back.payload),
        (&s.topic_name, s.publisher_id, &s.host_name, s.clock, s.time_us, &s.payload)
    );
});
