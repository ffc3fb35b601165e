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

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use shoal::Message;

mod proto {
    shoal::include_proto!();
}

const PY: &str = r#"
import json, sys, threading, time
sys.path.insert(0, sys.argv[1])
import ecal_common as ec
ecal_core = ec.import_ecal()
from ecal.msg.proto import helper
import ecal.msg.proto.core as pbcore
mode, topic, desc_file = sys.argv[2], sys.argv[3], sys.argv[4]
ours = open(desc_file, "rb").read()
ec.initialize(ecal_core, "shoal_typed_interop", ec.DEFAULT)
try:
    if mode == "sub":
        got, done = [], threading.Event()
        def on_msg(topic_id, dt, data):
            cls = helper.get_type_from_descriptor(dt.name, bytes(dt.descriptor))
            m = cls(); m.ParseFromString(bytes(data.buffer))
            got.append({"name": dt.name, "encoding": dt.encoding, "descriptor_equal": bytes(dt.descriptor) == ours,
                        "helper_equal": helper.get_descriptor_from_type(cls) == ours,
                        "seq": m.header.seq, "frame": m.header.frame_id, "status": m.Status.Name(m.status),
                        "unit": m.attributes["unit"], "clock": data.send_clock})
            if len(got) >= 3: done.set()
        sub = ecal_core.Subscriber(topic, ecal_core.DataTypeInformation("", "", b""), ecal_core.get_subscriber_configuration())
        sub.set_receive_callback(on_msg)
        print(json.dumps({"event": "ready"}), flush=True)
        done.wait(30)
        for g in got[:3]: print(json.dumps(g), flush=True)
        # eCAL 6.1.1's finalize can deadlock while a receive callback thread winds down ("Resource deadlock
        # avoided"): the results are out, so leave without it.
        sys.stdout.flush(); import os; os._exit(0)
    else:
        cls = helper.get_type_from_descriptor("pb.Imu", ours)
        pub = pbcore.Publisher(cls, topic)
        t0 = time.monotonic()
        while pub.get_subscriber_count() == 0 and time.monotonic() - t0 < 20: time.sleep(0.05)
        for seq in range(1, 4):
            m = cls(); m.header.seq = seq; m.header.frame_id = "from_ecal"; m.status = 1
            m.attributes["unit"] = "g"; m.temperature_c = 20.5
            pub.send(m); time.sleep(0.05)
        print(json.dumps({"event": "sent"}), flush=True)
        time.sleep(0.5)
finally:
    ecal_core.finalize()
"#;

/// Kills the eCAL peer if it is still running after 90 s, so that a hung peer fails the test instead of
/// hanging the suite.
fn watchdog(pid: u32) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(90));
        // SAFETY: kill(2) with a pid we spawned; at worst it reports ESRCH when the peer has exited.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    });
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv's python (made by `scripts/ecal-venv`, idempotent).
fn ecal_python() -> String {
    let out = Command::new(repo().join("scripts/ecal-venv")).stderr(Stdio::inherit()).output().expect("run ecal-venv");
    assert!(out.status.success(), "scripts/ecal-venv failed: eCAL 6.1.1 is needed for this test");
    String::from_utf8_lossy(&out.stdout).lines().last().expect("python path").trim().to_string()
}

fn py_script() -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("shoal-ecal-typed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("typed_peer.py");
    std::fs::File::create(&script).unwrap().write_all(PY.as_bytes()).unwrap();
    let desc = dir.join("imu.fds");
    std::fs::write(&desc, &proto::pb::Imu::type_info().descriptor).unwrap();
    (script, desc)
}

#[test]
fn shoal_typed_publisher_to_ecal_python_subscriber() {
    let python = ecal_python();
    let (script, desc) = py_script();
    let topic = format!("typed_to_ecal_{}", std::process::id());
    let mut py = Command::new(&python)
        .arg(&script)
        .arg(repo().join("tools/tests/ecal"))
        .args(["sub", &topic])
        .arg(&desc)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    watchdog(py.id());
    let mut out = std::io::BufReader::new(py.stdout.take().unwrap());
    // eCAL's helper prints "Protobuf version: ..." on import: wait for our JSON line.
    loop {
        let mut line = String::new();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0, "the eCAL peer ended early");
        if line.contains("\"ready\"") {
            break;
        }
    }
    let publ = Command::new(env!("CARGO_BIN_EXE_typed_proto")).args(["pub", "3", "100", &topic]).output().unwrap();
    assert!(publ.status.success(), "{}", String::from_utf8_lossy(&publ.stderr));
    let rest = std::io::read_to_string(out).unwrap();
    assert!(py.wait().unwrap().success());
    let got: Vec<serde_json::Value> =
        rest.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(got.len(), 3, "eCAL received {rest}");
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
    let python = ecal_python();
    let (script, desc) = py_script();
    let topic = format!("typed_from_ecal_{}", std::process::id());
    let node = shoal::Node::init("typed_from_ecal").unwrap();
    let sub = node.typed_subscriber::<proto::pb::Imu>(&topic).unwrap();
    let mut py = Command::new(&python)
        .arg(&script)
        .arg(repo().join("tools/tests/ecal"))
        .args(["pub", &topic])
        .arg(&desc)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    watchdog(py.id());
    for seq in 1..=3 {
        let got = sub.recv_timeout(Duration::from_secs(30)).unwrap();
        let h = got.msg.header.clone().unwrap();
        assert_eq!((h.seq, h.frame_id.as_str()), (seq, "from_ecal"));
        assert_eq!(got.msg.attributes["unit"], "g");
        assert_eq!(got.meta.type_info.name, "pb.Imu");
        assert_eq!(got.meta.type_info.encoding, "proto");
    }
    assert!(py.wait().unwrap().success());
}
