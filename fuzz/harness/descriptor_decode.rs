//! The body of the `descriptor_decode` fuzz target: a protobuf type as another process announces it in
//! registration (name, `FileDescriptorSet` bytes) and a payload of that type, decoded as the tools decode them
//! (`shoal::dynamic`: `describe` for `shoal topic info`, `DynamicDecoder` for `shoal topic echo`, the monitor's
//! inspector, `shoal record`'s schemas and the ROS 2 bridge's configuration). Shared (`#[path]`) by
//! `fuzz_targets/descriptor_decode.rs` and by `core/tests/fuzz_descriptor_decode.rs`, which runs the committed
//! seeds through it in the test suite.
//!
//! Input format (written by `seedgen`): `[name_len u8][name]` (UTF-8, lossy), `[desc_len u16 LE][descriptor]`,
//! then the payload (the rest).
//!
//! Oracle: nothing panics; `describe` and `DynamicDecoder::new` agree (a decoder exists exactly when the set
//! defines the announced type, with the same full name and fields); a payload that decodes re-encodes to bytes that
//! decode to an equal message (every field of the type equal, NaN equal to NaN; unknown fields kept) and to the same
//! JSON.

use prost::Message as _;
use prost_reflect::{DynamicMessage, ReflectMessage as _, Value};
use shoal::TypeInfo;
use shoal::dynamic::{DynamicDecoder, DynamicValue, describe};

/// What one input did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// The descriptor decoded as a `FileDescriptorSet`.
    pub(crate) set: bool,
    /// It defines the announced type (a decoder was made).
    pub(crate) decoder: bool,
    /// The payload decoded as a message of the type.
    pub(crate) message: bool,
    /// ... and converted to JSON.
    pub(crate) json: bool,
}

/// Runs one input (see the module docs).
pub(crate) fn run(data: &[u8]) -> Run {
    let mut run = Run::default();
    let Some((&name_len, rest)) = data.split_first() else { return run };
    let (name, rest) = rest.split_at(usize::from(name_len).min(rest.len()));
    let Some((desc_len, rest)) = rest.split_first_chunk::<2>() else { return run };
    let (descriptor, payload) = rest.split_at(usize::from(u16::from_le_bytes(*desc_len)).min(rest.len()));
    let type_info = TypeInfo::new(String::from_utf8_lossy(name).into_owned(), "proto", descriptor.to_vec());

    let described = describe(&type_info);
    let decoder = DynamicDecoder::new(&type_info);
    run.set = described.is_ok();
    let defined = described.as_ref().ok().and_then(|d| d.message.clone());
    match (&decoder, &defined) {
        (Ok(d), Some((full_name, fields))) => {
            let m = d.message_descriptor().expect("a proto decoder has a message descriptor");
            assert_eq!(m.full_name(), full_name, "describe and the decoder name different types");
            let names: Vec<String> = m.fields().map(|f| f.name().to_owned()).collect();
            assert_eq!(&names, fields, "describe and the decoder list different fields");
        }
        (Err(_), None) => {}
        (d, s) => panic!("describe says {s:?}, the decoder {:?}", d.as_ref().map(|_| ())),
    }
    let Ok(decoder) = decoder else { return run };
    run.decoder = true;
    let Ok(DynamicValue::Proto(message)) = decoder.decode(payload) else { return run };
    run.message = true;
    let again = message.encode_to_vec();
    let Ok(DynamicValue::Proto(back)) = decoder.decode(&again) else {
        panic!("a decoded message re-encoded ({} bytes) does not decode", again.len())
    };
    assert!(same_message(&back, &message), "a decoded message re-encoded decodes to another: {message:?} / {back:?}");
    let json = decoder.decode_to_json(payload);
    assert_eq!(
        json.as_ref().ok(),
        decoder.decode_to_json(&again).as_ref().ok(),
        "a message and its re-encoding give different JSON"
    );
    run.json = json.is_ok();
    run
}

/// Equal messages: every field of the type (set or default) equal by [`same_value`], and the same unknown fields.
fn same_message(a: &DynamicMessage, b: &DynamicMessage) -> bool {
    a.descriptor().fields().all(|f| same_value(&a.get_field(&f), &b.get_field(&f)))
        && a.unknown_fields().eq(b.unknown_fields())
}

/// Equal values, floats by their bits or both NaN (a NaN is not equal to itself), maps whatever their order.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::F32(x), Value::F32(y)) => x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
        (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
        (Value::Message(x), Value::Message(y)) => same_message(x, y),
        (Value::List(x), Value::List(y)) => x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same_value(v, w)),
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}
