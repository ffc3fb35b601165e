//! Typed protobuf interop with real eCAL 6.1.1 (`ecal.msg.proto` of the `eclipse-ecal==6.1.1` wheel, in the venv
//! that `scripts/ecal-venv` makes in `target/ecal-venv`), both directions:
//!
//! - shoal `typed_proto pub` → an eCAL Python subscriber that decodes with eCAL's own dynamic path
//!   (`ecal.msg.proto.helper.get_type_from_descriptor` on the name and descriptor from shoal's registration), and
//!   checks that eCAL's helper computes the same descriptor bytes for that type.
//! - an `ecal.msg.proto.Publisher` (message class built from shoal's descriptor, as no protoc is installed) →
//!   a shoal `TypedSubscriber<pb::Imu>`, which rejects mismatched types, so this also checks name and encoding.
//!
//! Needs eCAL's UDP or SHM data layer in shoal (the native ring is shoal-only).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use shoal::Message;

#[path = "../../tools/tests/support/process.rs"]
#[allow(dead_code)] // the tools' tests use the rest
mod support;

use support::{Proc, ecal_python, script};

mod proto {
    shoal::include_proto!();
}

const T: Duration = Duration::from_secs(30);

/// `typed_peer.py MODE TOPIC DESCRIPTOR_FILE` (from `tools/tests/ecal/`), with shoal's descriptor of `pb.Imu`.
fn typed_peer(mode: &str, topic: &str) -> Proc {
    let desc = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("imu_{}.fds", std::process::id()));
    std::fs::write(&desc, &proto::pb::Imu::type_info().descriptor).expect("write the descriptor file");
    let mut cmd = Command::new(ecal_python());
    cmd.arg(script("typed_peer.py")).args([mode, topic]).arg(&desc);
    Proc::spawn(&format!("eCAL typed {mode}"), cmd)
}

#[test]
fn shoal_typed_publisher_to_ecal_python_subscriber() {
    let topic = format!("typed_to_ecal_{}", std::process::id());
    let mut py = typed_peer("sub", &topic);
    py.expect("ready", T);
    let publ = Command::new(env!("CARGO_BIN_EXE_typed_proto")).args(["pub", "3", "100", &topic]).output().unwrap();
    assert!(publ.status.success(), "{}", String::from_utf8_lossy(&publ.stderr));
    let lines = py.until("done", T);
    py.wait_success(Duration::from_secs(10));
    let got: Vec<&serde_json::Value> = lines.iter().filter(|v| v["event"] == "msg").collect();
    assert_eq!(got.len(), 3, "eCAL received {lines:?}");
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g["name"], "pb.Imu");
        assert_eq!(g["encoding"], "proto");
        assert_eq!(g["descriptor_equal"], true, "the descriptor eCAL saw is shoal's");
        assert_eq!(g["helper_equal"], true, "eCAL's helper computes the same descriptor for the type");
        assert_eq!(g["seq"], i as u64 + 1);
        assert_eq!(g["frame"], "imu_link");
        assert_eq!(g["unit"], "m/s2");
    }
    assert_eq!(got[1]["status"], "STATUS_OK");
}

#[test]
fn ecal_python_typed_publisher_to_shoal_typed_subscriber() {
    let topic = format!("typed_from_ecal_{}", std::process::id());
    let node = shoal::Node::init("typed_from_ecal").unwrap();
    let sub = node.subscriber(&topic).typed::<proto::pb::Imu>().create().unwrap();
    let mut py = typed_peer("pub", &topic);
    for seq in 1..=3 {
        let got = sub.recv_timeout(T).unwrap();
        let h = got.msg.header.clone().unwrap();
        assert_eq!((h.seq, h.frame_id.as_str()), (seq, "from_ecal"));
        assert_eq!(got.msg.attributes["unit"], "g");
        assert_eq!(got.meta.type_info.name, "pb.Imu");
        assert_eq!(got.meta.type_info.encoding, "proto");
    }
    py.expect("sent", T);
    py.wait_success(Duration::from_secs(10));
}
