//! End to end: the `shoal` binary against real eCAL 6.1.1 (the Python `ecal.msg.proto` peers of
//! `tools/tests/ecal/typed_peer.py`, in the venv `scripts/ecal-venv` makes): an eCAL typed publisher is listed with
//! its type, its messages are decoded by `shoal topic echo`, and a message `shoal topic pub` builds from JSON is
//! decoded by an eCAL subscriber with eCAL's own dynamic protobuf path.

mod support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use prost::Message as _;
use serde_json::Value;
use support::{Proc, ecal_python, script};

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");
const T: Duration = Duration::from_secs(30);

fn imu_proto() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/proto/imu.proto")
}

/// The descriptor shoal's generated `pb.Imu` carries (the file and its imports, as eCAL's helper builds it),
/// written to a file for the Python peer.
fn imu_descriptor_file() -> PathBuf {
    let mut c = protox::Compiler::new([imu_proto().parent().unwrap()]).unwrap();
    c.include_imports(true).include_source_info(false);
    c.open_file(imu_proto()).unwrap();
    let fds = c.file_descriptor_set();
    let by_name: HashMap<&str, &prost_types::FileDescriptorProto> = fds.file.iter().map(|f| (f.name(), f)).collect();
    let bytes = shoal_codegen::ecal_descriptor_set("imu.proto", &by_name).encode_to_vec();
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cli_imu_{}.fds", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn typed_peer(mode: &str, topic: &str) -> Proc {
    let mut cmd = Command::new(ecal_python());
    cmd.arg(script("typed_peer.py")).args([mode, topic]).arg(imu_descriptor_file());
    Proc::spawn(&format!("eCAL typed {mode}"), cmd)
}

fn json_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn ecal_typed_publisher_is_listed_and_echoed_decoded() {
    let topic = format!("cli_from_ecal_{}", std::process::id());
    let mut py = typed_peer("pub", &topic);
    py.expect("ready", T);
    let list = Command::new(SHOAL).args(["list", "--json", "--wait-ms", "2500"]).output().unwrap();
    let info = Command::new(SHOAL).args(["topic", "info", &topic, "--json", "--wait-ms", "500"]).output().unwrap();
    let rows = json_lines(&list.stdout);
    let t = rows.iter().find(|v| v["kind"] == "topic" && v["topic"] == topic.as_str()).expect("eCAL topic listed");
    assert_eq!(t["types"][0]["type_name"], "pb.Imu", "{t}");
    assert_eq!(t["types"][0]["encoding"], "proto", "{t}");
    assert_eq!(t["publishers"], 1, "{t}");
    assert!(rows.iter().any(|v| v["kind"] == "process" && v["pid"] == py.pid() && v["runtime"] == "ecal"), "{rows:?}");
    let ends = json_lines(&info.stdout);
    assert_eq!(ends.len(), 1, "{}", String::from_utf8_lossy(&info.stderr));
    assert_eq!(ends[0]["pid"], py.pid());
    assert_eq!(ends[0]["descriptor"]["message"], "pb.Imu", "{}", ends[0]);

    // The publisher sends 3 messages once a subscriber matched: this one.
    let echo = Command::new(SHOAL)
        .args(["topic", "echo", &topic, "--count", "3", "--json", "--timeout", "30"])
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert!(echo.status.success(), "{}", String::from_utf8_lossy(&echo.stderr));
    let got = json_lines(&echo.stdout);
    assert_eq!(got.len(), 3);
    for (i, v) in got.iter().enumerate() {
        let m = &v["message"];
        assert_eq!(m["header"]["seq"], i as u64 + 1, "{v}");
        assert_eq!(m["header"]["frame_id"], "from_ecal", "{v}");
        assert_eq!(m["status"], "STATUS_OK", "{v}");
        assert_eq!(m["attributes"]["unit"], "g", "{v}");
        assert_eq!(m["temperature_c"], 20.5, "{v}");
        assert_eq!(v["pid"], py.pid(), "{v}");
    }
    py.expect("sent", T);
    py.wait_success(Duration::from_secs(10));
}

#[test]
fn pub_from_json_is_decoded_by_an_ecal_subscriber() {
    let topic = format!("cli_to_ecal_{}", std::process::id());
    let mut py = typed_peer("sub", &topic);
    py.expect("ready", T);
    let data =
        r#"{"header": {"seq": 7, "frame_id": "json"}, "status": "STATUS_DEGRADED", "attributes": {"unit": "s"}}"#;
    let publ = Command::new(SHOAL)
        .args(["topic", "pub", &topic, "--type", "pb.Imu", "--data", data, "--count", "3", "--rate", "20"])
        .arg("--proto")
        .arg(imu_proto())
        .args(["--wait-timeout", "20"])
        .output()
        .unwrap();
    assert!(publ.status.success(), "{}", String::from_utf8_lossy(&publ.stderr));
    let lines = py.until("done", T);
    py.wait_success(Duration::from_secs(10));
    let got: Vec<&Value> = lines.iter().filter(|v| v["event"] == "msg").collect();
    assert_eq!(got.len(), 3, "{lines:?}");
    for g in got {
        assert_eq!((g["name"].as_str(), g["encoding"].as_str()), (Some("pb.Imu"), Some("proto")), "{g}");
        assert_eq!(g["descriptor_equal"], true, "the descriptor from --proto is the one shoal's types carry: {g}");
        assert_eq!(g["helper_equal"], true, "and the one eCAL's helper computes: {g}");
        assert_eq!((g["seq"].as_u64(), g["frame"].as_str()), (Some(7), Some("json")), "{g}");
        assert_eq!((g["status"].as_str(), g["unit"].as_str()), (Some("STATUS_DEGRADED"), Some("s")), "{g}");
    }
}
