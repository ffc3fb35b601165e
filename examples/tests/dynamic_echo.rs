//! A process with no generated code (this test binary includes none) decodes a shoal typed topic using only the
//! type information from registration: `shoal::dynamic::decode_to_json` on samples of a raw subscriber.

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn raw_subscriber_decodes_typed_proto_topic_dynamically() {
    let topic = format!("dyn_echo_{}", std::process::id());
    let node = shoal::Node::init("dyn_echo").unwrap();
    let sub = node.subscriber(&topic).create().unwrap();
    let mut publ = Command::new(env!("CARGO_BIN_EXE_typed_proto"))
        .args(["pub", "3", "20", &topic])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    let mut type_info = None;
    for _ in 0..3 {
        let s = sub.recv_timeout(Duration::from_secs(30)).unwrap();
        let ti = s.type_info();
        assert_eq!((ti.name.as_str(), ti.encoding.as_str()), ("pb.Imu", "proto"));
        let json = shoal::dynamic::decode_to_json(ti, s.payload()).unwrap();
        seen.push(json);
        type_info = Some(ti.clone());
    }
    assert!(publ.wait().unwrap().success());
    let j = &seen[1];
    assert_eq!(j["header"]["seq"], 2, "{j}");
    assert_eq!(j["header"]["frame_id"], "imu_link", "{j}");
    assert!(j["header"]["stamp"].is_string(), "Timestamp in its JSON form: {j}");
    assert_eq!(j["status"], "STATUS_OK", "{j}");
    assert_eq!(j["covariance"].as_array().map(Vec::len), Some(9), "{j}");
    assert_eq!(j["attributes"]["unit"], "m/s2", "{j}");
    assert_eq!(j["calibration_file"], "cal_2.yaml", "{j}");
    assert_eq!(j["linear_acceleration"]["z"], 9.81, "{j}");
    assert_eq!(seen[0]["temperature_c"], 21.0, "{}", seen[0]);

    // One decoder per topic, built from the announced TypeInfo; malformed bytes are an error, not a panic.
    let dec = shoal::dynamic::DynamicDecoder::new(&type_info.unwrap()).unwrap();
    assert_eq!(dec.message_descriptor().map(|m| m.full_name().to_owned()).as_deref(), Some("pb.Imu"));
    assert!(matches!(dec.decode(&[0x0f, 0x01]), Err(shoal::dynamic::DynamicError::Decode { .. })));
    assert!(matches!(dec.decode(&[0x0a, 0x40, 0x01]), Err(shoal::dynamic::DynamicError::Decode { .. })));
}

#[test]
fn raw_subscriber_shows_flatbuffers_topic_as_raw_view() {
    let topic = format!("dyn_echo_fb_{}", std::process::id());
    let node = shoal::Node::init("dyn_echo").unwrap();
    let sub = node.subscriber(&topic).create().unwrap();
    let mut publ = Command::new(env!("CARGO_BIN_EXE_typed_fbs"))
        .args(["pub", "1", "20", &topic])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let s = sub.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(publ.wait().unwrap().success());
    let json = shoal::dynamic::decode_to_json(s.type_info(), s.payload()).unwrap();
    assert_eq!(json["encoding"], "flatb");
    assert_eq!(json["type"], "demo.Pose");
    assert_eq!(json["size"], s.payload().len());
    assert_eq!(json["hex"].as_str().map(str::len), Some(2 * s.payload().len()));
}
