//! The Zenoh bridge's decoders of what arrives from Zenoh (`bridge-zenoh/src/wire.rs`, `keyexpr.rs`, compiled here
//! from the same files, so the `zenoh` crate is not linked): the attachment parser, the type read from an encoding
//! and the key-to-topic unescaping, on fuzzer bytes. Nothing panics; an attachment that parses is written back
//! and parses to the same; a topic read from a key gives that key back.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../bridge-zenoh/src/keyexpr.rs"]
mod keyexpr;
#[allow(dead_code)] // the bridge uses more of it than this target
#[path = "../../bridge-zenoh/src/wire.rs"]
mod wire;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(a)) = wire::parse(Some(data)) {
        // Written back with the descriptor when it came along (the fingerprint then matches it, parse checked).
        let d = a.descriptor.unwrap_or_default();
        let again =
            wire::attachment(a.bridge, a.seq, d, a.fingerprint, a.descriptor.is_some() && d.len() == a.descriptor_len);
        let b = wire::parse(Some(&again)).expect("an attachment written back parses").expect("and is one");
        assert_eq!((a.bridge, a.seq, a.descriptor), (b.bridge, b.seq, b.descriptor));
    }
    let text = String::from_utf8_lossy(data);
    let t = wire::type_of_encoding(&text);
    let _ = wire::encoding_of(&t);
    if let Some(topic) = keyexpr::topic_of_key("shoal", &text) {
        assert_eq!(keyexpr::topic_of_key("shoal", &keyexpr::topic_key("shoal", &topic)).as_deref(), Some(&*topic));
    }
});
