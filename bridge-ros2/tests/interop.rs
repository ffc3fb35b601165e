//! The bridge against a real ROS 2 peer: Eclipse Cyclone DDS 11.0.1 from PyPI (`tests/dds/peer.py`, in the venv
//! `scripts/dds-venv` makes in `target/dds-venv`), which checks every sample it receives byte for byte against
//! rosbags' CDR serializer, and builds what it sends with rosbags. The shoal side is `shoal-ros2-peer`.
//!
//! Every test runs inside a private network namespace that it creates (only `lo`, multicast on), so no DDS or
//! shoal traffic leaves it; it needs root (`ip netns`) and prints SKIPPED otherwise. Tests that mostly wait run side
//! by side; the two that move megabyte samples run alone (`root::alone`). Each is bounded by timeouts.

#[path = "../../tools/tests/support/process.rs"]
#[allow(dead_code)] // the tools' tests use the rest
mod support;

#[path = "../../tools/tests/support/root.rs"]
mod root;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use root::{alone, root_or_skip, run, shared};
use serde_json::Value;
use shoal_ros2_bridge::testdata::RAW_TYPE;
use support::Proc;

const BRIDGE: &str = env!("CARGO_BIN_EXE_shoal-ros2-bridge");
const PEER: &str = env!("CARGO_BIN_EXE_shoal-ros2-peer");

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python with cyclonedds and rosbags, made by `scripts/dds-venv` on first use.
fn python() -> String {
    static PY: OnceLock<Result<String, String>> = OnceLock::new();
    match PY.get_or_init(|| support::venv_python("scripts/dds-venv")) {
        Ok(p) => p.clone(),
        Err(e) => panic!("the Cyclone DDS Python environment is not available: {e}"),
    }
}

/// A network namespace with only `lo` (up, multicast on, the multicast route on it); deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn create(tag: &str) -> Netns {
        let ns = Netns { name: format!("shoal_br_{tag}_{}", std::process::id()) };
        let _ = run(&["ip", "netns", "del", &ns.name]);
        let setup = || -> Result<(), String> {
            run(&["ip", "netns", "add", &ns.name])?;
            run(&["ip", "-n", &ns.name, "link", "set", "lo", "up"])?;
            run(&["ip", "-n", &ns.name, "link", "set", "lo", "multicast", "on"])?;
            run(&["ip", "-n", &ns.name, "route", "add", "224.0.0.0/4", "dev", "lo"])
        };
        if let Err(e) = setup() {
            panic!("cannot set up the network namespace: {e}");
        }
        ns
    }

    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]).args(args);
        cmd.env("CYCLONEDDS_URI", format!("file://{}", dir().join("tests/dds/cyclone_lo.xml").display()));
        cmd.env("RUST_LOG", "info");
        cmd
    }

    fn bridge(&self, args: &[&str]) -> Proc {
        let p = Proc::spawn("bridge", self.command(BRIDGE, args));
        p.expect("ready", Duration::from_secs(20));
        p
    }

    fn shoal(&self, name: &str, args: &[&str]) -> Proc {
        let p = Proc::spawn(name, self.command(PEER, args));
        p.expect("ready", Duration::from_secs(20));
        p
    }

    /// eCAL 6.1.1's own monitoring (`tools/tests/ecal/monitor.py`), a snapshot every 300 ms of the topics whose
    /// name contains `filter`.
    fn ecal_monitor(&self, filter: &str, seconds: u32) -> Proc {
        let py = support::ecal_python();
        let script = support::script("monitor.py");
        let s = seconds.to_string();
        let args = [script.as_str(), "--seconds", &s, "--interval-ms", "300", "--topic-contains", filter];
        let p = Proc::spawn("ecal monitor", self.command(&py, &args));
        p.expect("ready", Duration::from_secs(20));
        p
    }

    fn cyclone(&self, name: &str, args: &[&str]) -> Proc {
        let py = python();
        let script = dir().join("tests/dds/peer.py");
        let mut full = vec![script.to_str().expect("utf-8 path")];
        full.extend_from_slice(args);
        let p = Proc::spawn(name, self.command(&py, &full));
        p.expect("ready", Duration::from_secs(20));
        p
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

/// Waits until the bridge has seen the remote `kind` ("reader"/"writer") endpoint on `route_prefix`.
fn wait_remote(bridge: &Proc, route_prefix: &str, kind: &str) {
    bridge.expect_line(&format!("remote {kind} on {route_prefix}"), Duration::from_secs(20), |v| {
        v["event"] == "remote_endpoint"
            && v["kind"] == kind
            && v["route"].as_str().is_some_and(|r| r.starts_with(route_prefix))
    });
    std::thread::sleep(Duration::from_millis(300));
}

fn assert_all(name: &str, summary: &Value, count: u64) {
    eprintln!("{name}: {summary}");
    assert_eq!(summary["received"], count, "{name}: every message received: {summary}");
    assert_eq!(
        summary["intact"], count,
        "{name}: every message equal to the one sent (CDR bytes = rosbags'): {summary}"
    );
    assert_eq!(summary["duplicates"], 0, "{name}: no duplicates: {summary}");
}

/// Cyclone publisher → bridge → shoal subscriber: `count` messages of `kind`.
fn ros_to_shoal(ns: &Netns, _bridge: &Proc, kind: &str, topic: &str, count: u64, size: usize, rate: &str) -> Value {
    ros_to_shoal_from(ns, kind, topic, count, size, rate, 1)
}

/// [`ros_to_shoal`] of messages `first..first + count`.
fn ros_to_shoal_from(ns: &Netns, kind: &str, topic: &str, count: u64, size: usize, rate: &str, first: u32) -> Value {
    let (c, s, f) = (count.to_string(), size.to_string(), first.to_string());
    let mut sub = ns.shoal(
        "shoal sub",
        &[
            "sub",
            "--topic",
            topic,
            "--kind",
            kind,
            "--count",
            &c,
            "--size",
            &s,
            "--timeout-ms",
            "60000",
            "--first",
            &f,
            // The bridge's shoal publisher matched before the Cyclone publisher starts: none of the first messages
            // is sent before the subscriber is known (a registration refresh can take up to a second under load).
            "--wait-pubs",
            "1",
        ],
    );
    let route = format!("{topic} <->");
    let mut publ =
        ns.cyclone("cyclone pub", &["pub", kind, &format!("/{topic}"), &c, &s, "--rate", rate, "--first", &f]);
    let done = publ.expect("done", Duration::from_secs(90));
    assert_eq!(done["sent"], count);
    let summary = sub.expect("summary", Duration::from_secs(70));
    assert_all(&format!("cyclone -> bridge -> shoal, {kind} {size} B ({route})"), &summary, count);
    sub.wait_success(Duration::from_secs(10));
    publ.wait_success(Duration::from_secs(10));
    summary
}

/// shoal publisher → bridge → Cyclone subscriber.
fn shoal_to_ros(ns: &Netns, bridge: &Proc, kind: &str, topic: &str, count: u64, size: usize, rate: &str) -> Value {
    shoal_to_ros_from(ns, bridge, kind, topic, count, size, rate, 1)
}

/// [`shoal_to_ros`] of messages `first..first + count`.
#[allow(clippy::too_many_arguments)]
fn shoal_to_ros_from(
    ns: &Netns,
    bridge: &Proc,
    kind: &str,
    topic: &str,
    count: u64,
    size: usize,
    rate: &str,
    first: u32,
) -> Value {
    let (c, s, f) = (count.to_string(), size.to_string(), first.to_string());
    let mut sub =
        ns.cyclone("cyclone sub", &["sub", kind, &format!("/{topic}"), &c, &s, "--timeout", "90", "--first", &f]);
    wait_remote(bridge, &format!("{topic} <->"), "reader");
    let mut publ = ns.shoal(
        "shoal pub",
        &["pub", "--topic", topic, "--kind", kind, "--count", &c, "--size", &s, "--rate", rate, "--first", &f],
    );
    let done = publ.expect("done", Duration::from_secs(90));
    assert_eq!(done["sent"], count);
    let summary = sub.expect("summary", Duration::from_secs(100));
    assert_all(&format!("shoal -> bridge -> cyclone, {kind} {size} B"), &summary, count);
    sub.wait_success(Duration::from_secs(10));
    publ.wait_success(Duration::from_secs(10));
    summary
}

/// Stops the bridge and returns its final statistics line.
fn final_stats(bridge: &mut Proc) -> Value {
    bridge.signal(libc::SIGTERM);
    bridge.expect_line("final stats", Duration::from_secs(15), |v| v["event"] == "stats" && v["final"] == true)
}

/// The counters of the route of shoal topic `topic` in a statistics line.
fn route_stats(line: &Value, topic: &str) -> Value {
    line["routes"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["route"].as_str().is_some_and(|n| n.starts_with(&format!("{topic} <->")))))
        .cloned()
        .unwrap_or_else(|| panic!("no route {topic} in {line}"))
}

fn stats_of(bridge: &mut Proc, topic: &str) -> Value {
    route_stats(&final_stats(bridge), topic)
}

#[test]
fn string_and_imu_both_ways() {
    if !root_or_skip("string_and_imu_both_ways") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("si");
    let mut bridge = ns.bridge(&[
        "--topic",
        "chat_in=std_msgs/msg/String,direction=ros_to_shoal",
        "--topic",
        "chat_out=std_msgs/msg/String,direction=shoal_to_ros",
        "--topic",
        "imu_in=sensor_msgs/msg/Imu,direction=ros_to_shoal",
        "--topic",
        "imu_out=sensor_msgs/msg/Imu,direction=shoal_to_ros",
    ]);
    let s = ros_to_shoal(&ns, &bridge, "string", "chat_in", 50, 0, "100");
    // The bridge's shoal publisher announces the protobuf type, with its descriptor, for shoal's and eCAL's monitors.
    assert_eq!(s["type"]["name"], "std_msgs.String");
    assert_eq!(s["type"]["encoding"], "proto");
    assert!(s["type"]["descriptor_len"].as_u64().unwrap_or(0) > 0, "{s}");
    // The descriptor alone (no generated code) decodes what the bridge sent: the last message, number 50.
    assert_eq!(s["type"]["decoded"]["data"], "hello 50", "{s}");
    shoal_to_ros(&ns, &bridge, "string", "chat_out", 50, 0, "100");
    let s = ros_to_shoal(&ns, &bridge, "imu", "imu_in", 50, 0, "100");
    assert_eq!(s["type"]["name"], "sensor_msgs.Imu");
    assert_eq!(s["type"]["decoded"]["header"]["frame_id"], "imu", "{s}");
    assert_eq!(s["type"]["decoded"]["header"]["stamp"]["sec"], 50, "{s}");
    assert_eq!(s["type"]["decoded"]["linear_acceleration"]["x"], 9.75, "{s}");
    shoal_to_ros(&ns, &bridge, "imu", "imu_out", 50, 0, "100");
    let st = stats_of(&mut bridge, "imu_out");
    assert_eq!(st["to_ros"], 50, "{st}");
}

#[test]
fn images_1mb_and_6mb_both_ways() {
    if !root_or_skip("images_1mb_and_6mb_both_ways") {
        return;
    }
    let _cores = alone();
    let ns = Netns::create("im");
    let bridge = ns.bridge(&[
        "--topic",
        "cam_in=sensor_msgs/msg/Image,direction=ros_to_shoal",
        "--topic",
        "cam_out=sensor_msgs/msg/Image,direction=shoal_to_ros",
    ]);
    ros_to_shoal(&ns, &bridge, "image", "cam_in", 10, 1 << 20, "10");
    shoal_to_ros(&ns, &bridge, "image", "cam_out", 10, 1 << 20, "10");
    ros_to_shoal(&ns, &bridge, "image", "cam_in", 3, 6_220_800, "1");
    shoal_to_ros(&ns, &bridge, "image", "cam_out", 3, 6_220_800, "1");
}

#[test]
fn pointcloud2_both_ways() {
    if !root_or_skip("pointcloud2_both_ways") {
        return;
    }
    let _cores = alone();
    let ns = Netns::create("pc");
    let bridge = ns.bridge(&[
        "--topic",
        "pc_in=sensor_msgs/msg/PointCloud2,direction=ros_to_shoal",
        "--topic",
        "pc_out=sensor_msgs/msg/PointCloud2,direction=shoal_to_ros",
    ]);
    ros_to_shoal(&ns, &bridge, "pointcloud2", "pc_in", 10, 1 << 20, "10");
    shoal_to_ros(&ns, &bridge, "pointcloud2", "pc_out", 10, 1 << 20, "10");
}

#[test]
fn both_directions_without_echo() {
    if !root_or_skip("both_directions_without_echo") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("ec");
    let mut bridge = ns.bridge(&["--topic", "talk=std_msgs/msg/String,direction=both"]);
    // A Cyclone subscriber on the same ROS topic sees the Cyclone publisher's 20 messages once each: the bridge
    // does not send them back to ROS 2 (its shoal subscriber ignores its own shoal publisher).
    let csub = ns.cyclone("cyclone sub", &["sub", "string", "/talk", "20", "0", "--timeout", "12"]);
    let s = ros_to_shoal(&ns, &bridge, "string", "talk", 20, 0, "50");
    assert_eq!(s["duplicates"], 0);
    let c = csub.expect("summary", Duration::from_secs(30));
    assert_all("cyclone sub beside the bridge", &c, 20);
    let st = stats_of(&mut bridge, "talk");
    assert_eq!(st["to_shoal"], 20, "{st}");
    assert_eq!(st["to_ros"], 0, "nothing echoed back to ROS 2: {st}");
    assert!(st["own_ignored"].as_u64().unwrap_or(0) >= 20, "the bridge saw and ignored its own shoal messages: {st}");
}

#[test]
fn bad_input_is_dropped_counted_and_survived() {
    if !root_or_skip("bad_input_is_dropped_counted_and_survived") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("bd");
    let mut bridge = ns.bridge(&[
        "--topic",
        "imu_in=sensor_msgs/msg/Imu,direction=ros_to_shoal",
        "--topic",
        "imu_out=sensor_msgs/msg/Imu,direction=shoal_to_ros",
    ]);
    // shoal side: 3 payloads that are not protobuf, 2 from a publisher of another type, then 10 good ones.
    let mut csub = ns.cyclone("cyclone sub", &["sub", "imu", "/imu_out", "10", "0", "--timeout", "40"]);
    wait_remote(&bridge, "imu_out <->", "reader");
    let mut publ = ns.shoal(
        "shoal pub",
        &["pub", "--topic", "imu_out", "--kind", "imu", "--count", "10", "--bad", "3", "--wrong-type", "2"],
    );
    publ.expect("done", Duration::from_secs(30));
    assert_all("shoal (with bad input) -> cyclone", &csub.expect("summary", Duration::from_secs(45)), 10);
    publ.wait_success(Duration::from_secs(10));
    csub.wait_success(Duration::from_secs(10));

    // ROS side: 3 samples with the Imu type name whose CDR is not an Imu, then 10 good ones.
    let mut sub =
        ns.shoal("shoal sub", &["sub", "--topic", "imu_in", "--kind", "imu", "--count", "10", "--timeout-ms", "40000"]);
    let mut cpub = ns.cyclone("cyclone pub", &["pub", "imu", "/imu_in", "10", "0", "--bad", "3"]);
    cpub.expect("done", Duration::from_secs(40));
    let s = sub.expect("summary", Duration::from_secs(45));
    assert_all("cyclone (with bad CDR) -> shoal", &s, 10);
    assert_eq!(s["undecodable"], 0, "nothing undecodable reached shoal: {s}");
    cpub.wait_success(Duration::from_secs(10));
    sub.wait_success(Duration::from_secs(10));

    // The drops reach registration: the bridge's shoal subscriber of imu_out dropped 3 + 2 messages it received,
    // its shoal publisher of imu_in 3 it could not forward. shoal's monitor view (a snapshot of registration) and
    // eCAL 6.1.1's monitoring both show them, with the protobuf type the bridge announces.
    let bridge_entity = |topics: &[Value], topic: &str, dir: &str| {
        topics
            .iter()
            .find(|t| t["topic"] == topic && t["direction"] == dir && t["unit_name"] == "shoal_ros2_bridge")
            .cloned()
    };
    let shoal_mon = ns.shoal("shoal monitor", &["monitor", "--topic-contains", "imu_", "--duration-ms", "20000"]);
    let snap = shoal_mon.expect_line("the bridge's drops in shoal's snapshot", Duration::from_secs(20), |v| {
        let ts = v["topics"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        bridge_entity(ts, "imu_out", "sub").is_some_and(|e| e["message_drops"] == 5)
            && bridge_entity(ts, "imu_in", "pub").is_some_and(|e| e["message_drops"] == 3)
    });
    let ts = snap["topics"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let shoal_pub = bridge_entity(ts, "imu_in", "pub").expect("the bridge's publisher");
    eprintln!("shoal's monitor: {shoal_pub}");
    assert_eq!(shoal_pub["type"]["name"], "sensor_msgs.Imu", "{shoal_pub}");
    assert_eq!(shoal_pub["type"]["encoding"], "proto", "{shoal_pub}");
    let descriptor_len = shoal_pub["type"]["descriptor_len"].as_u64().unwrap_or(0);
    assert!(descriptor_len > 0, "{shoal_pub}");

    let ecal_entity = |list: &Value, topic: &str| {
        list.as_array()
            .and_then(|l| l.iter().find(|t| t["topic_name"] == topic && t["unit_name"] == "shoal_ros2_bridge"))
            .cloned()
    };
    let ecal_mon = ns.ecal_monitor("imu_", 20);
    let snap = ecal_mon.expect_line("the bridge's drops in eCAL's monitoring", Duration::from_secs(25), |v| {
        v["event"] == "snapshot"
            && ecal_entity(&v["subscribers"], "imu_out").is_some_and(|e| e["message_drops"] == 5)
            && ecal_entity(&v["publishers"], "imu_in").is_some_and(|e| e["message_drops"] == 3)
    });
    let ecal_pub = ecal_entity(&snap["publishers"], "imu_in").expect("the bridge's publisher in eCAL");
    eprintln!("eCAL's monitor: {ecal_pub}");
    assert_eq!(ecal_pub["datatype"]["name"], "sensor_msgs.Imu", "{ecal_pub}");
    assert_eq!(ecal_pub["datatype"]["encoding"], "proto", "{ecal_pub}");
    assert_eq!(ecal_pub["datatype"]["descriptor_len"], descriptor_len, "eCAL sees the same descriptor: {ecal_pub}");
    let ecal_sub = ecal_entity(&snap["subscribers"], "imu_out").expect("the bridge's subscriber in eCAL");
    assert_eq!(ecal_sub["datatype"]["name"], "sensor_msgs.Imu", "{ecal_sub}");

    let fin = final_stats(&mut bridge);
    let out = route_stats(&fin, "imu_out");
    assert_eq!(out["dropped"]["proto_decode"], 3, "{out}");
    assert_eq!(out["dropped"]["type_mismatch"], 2, "{out}");
    assert_eq!(out["to_ros"], 10, "{out}");
    let inn = route_stats(&fin, "imu_in");
    assert_eq!(inn["dropped"]["cdr_decode"], 3, "{inn}");
    assert_eq!(inn["to_shoal"], 10, "{inn}");
    assert!(bridge.wait_exit(Duration::from_secs(10)).is_some_and(|s| s.success()), "the bridge exits cleanly");
}

#[test]
fn raw_fallback_both_ways() {
    if !root_or_skip("raw_fallback_both_ways") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("rw");
    let desc = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("shoal_test_blob_{}.desc", std::process::id()));
    let descriptor = blob_descriptor();
    std::fs::write(&desc, &descriptor).expect("write the descriptor");
    let inbound = format!("raw_in=raw,direction=ros_to_shoal,shoal_type={RAW_TYPE}");
    let typed = format!("raw_pb=raw,direction=ros_to_shoal,shoal_type={RAW_TYPE},shoal_descriptor={}", desc.display());
    let mut bridge = ns.bridge(&[
        "--topic",
        &inbound,
        "--topic",
        "raw_out=raw,direction=shoal_to_ros",
        "--topic",
        &typed,
        "--topic",
        "raw_other=raw,direction=ros_to_shoal,shoal_type=other.Type",
    ]);
    // ROS 2 → shoal: the bytes of `data`, announced as the configured type; the Cyclone peer's samples carry it in
    // layout.dim[0].label.
    let s = ros_to_shoal(&ns, &bridge, "raw", "raw_in", 20, 1000, "50");
    assert_eq!((&s["type"]["name"], &s["type"]["encoding"]), (&Value::from(RAW_TYPE), &Value::from("raw")), "{s}");
    // shoal → ROS 2: the Cyclone peer checks every sample against rosbags' bytes of a UInt8MultiArray whose label is
    // the type the shoal publisher announces, and whose size and stride are the payload's length.
    shoal_to_ros(&ns, &bridge, "raw", "raw_out", 20, 1000, "50");
    ros_to_shoal(&ns, &bridge, "raw", "raw_in", 5, 1 << 20, "10");
    shoal_to_ros(&ns, &bridge, "raw", "raw_out", 5, 1 << 20, "10");

    // With shoal_descriptor the shoal publisher announces the protobuf type: encoding proto, the descriptor.
    let mon = ns.shoal("shoal monitor", &["monitor", "--topic-contains", "raw_pb", "--duration-ms", "15000"]);
    let snap = mon.expect_line("raw_pb's publisher", Duration::from_secs(15), |v| {
        v["topics"].as_array().is_some_and(|ts| ts.iter().any(|t| t["direction"] == "pub"))
    });
    let t = snap["topics"].as_array().and_then(|ts| ts.iter().find(|t| t["direction"] == "pub")).expect("a publisher");
    assert_eq!(t["type"]["name"], RAW_TYPE, "{t}");
    assert_eq!(t["type"]["encoding"], "proto", "{t}");
    assert_eq!(t["type"]["descriptor_len"], descriptor.len(), "{t}");

    // A ROS 2 sample labelled with another type than the route's shoal_type is a type change: dropped, counted.
    let mut publ = ns.cyclone("cyclone pub (other type)", &["pub", "raw", "/raw_other", "5", "100"]);
    publ.expect("done", Duration::from_secs(30));
    publ.wait_success(Duration::from_secs(10));
    let st = stats_of(&mut bridge, "raw_other");
    assert_eq!((&st["dropped"]["type_mismatch"], &st["to_shoal"]), (&Value::from(5), &Value::from(0)), "{st}");
    let _ = std::fs::remove_file(&desc);
}

/// A `FileDescriptorSet` defining `shoal_test.Blob { bytes data = 1; }`.
fn blob_descriptor() -> Vec<u8> {
    use prost_types::{
        DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet, field_descriptor_proto,
    };
    let field = FieldDescriptorProto {
        name: Some("data".into()),
        number: Some(1),
        label: Some(field_descriptor_proto::Label::Optional as i32),
        r#type: Some(field_descriptor_proto::Type::Bytes as i32),
        json_name: Some("data".into()),
        ..Default::default()
    };
    let file = FileDescriptorProto {
        name: Some("shoal_test.proto".into()),
        package: Some("shoal_test".into()),
        syntax: Some("proto3".into()),
        message_type: vec![DescriptorProto { name: Some("Blob".into()), field: vec![field], ..Default::default() }],
        ..Default::default()
    };
    prost::Message::encode_to_vec(&FileDescriptorSet { file: vec![file] })
}

#[test]
fn ros2_node_list_finds_the_bridge() {
    if !root_or_skip("ros2_node_list_finds_the_bridge") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("nl");
    let _bridge = ns.bridge(&[
        "--node-name",
        "bridge_under_test",
        "--topic",
        "a=std_msgs/msg/String,direction=ros_to_shoal",
        "--topic",
        "b=std_msgs/msg/String,direction=shoal_to_ros",
    ]);
    // What `ros2 node list` reads: ros_discovery_info (rmw_dds_common/msg/ParticipantEntitiesInfo), read by a
    // Cyclone DDS reader and decoded again by rosbags' copy of the .msg.
    let mut reader = ns.cyclone("cyclone ros_discovery_info reader", &["discovery", "bridge_under_test"]);
    let node = reader.expect("node", Duration::from_secs(25));
    eprintln!("ros_discovery_info: {node}");
    assert_eq!(node["namespace"], "/", "{node}");
    // Its readers include the route's /a reader, its writers the /b writer (and rosout, parameter events).
    assert!(node["readers"].as_u64().unwrap_or(0) >= 1, "{node}");
    assert!(node["writers"].as_u64().unwrap_or(0) >= 2, "{node}");
    reader.wait_success(Duration::from_secs(10));
}

/// Peers killed with SIGKILL in the middle of a stream, on each side and in each role; the bridge carries on
/// and the traffic of their successors flows again.
#[test]
fn peers_killed_mid_stream_traffic_resumes() {
    if !root_or_skip("peers_killed_mid_stream_traffic_resumes") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("kl");
    let mut bridge = ns.bridge(&[
        "--topic",
        "k_in=sensor_msgs/msg/Imu,direction=ros_to_shoal",
        "--topic",
        "k_out=sensor_msgs/msg/Imu,direction=shoal_to_ros",
    ]);
    let streamed = |name: &str, summary: &Value| {
        assert_all(name, summary, 20);
        assert!(summary["other"].as_u64().unwrap_or(0) > 0, "{name}: the killed publisher's stream arrived: {summary}");
    };

    // 1. The Cyclone publisher killed: one shoal subscriber sees its stream, then its successor's messages.
    let mut sub = ns.shoal(
        "shoal sub",
        &["sub", "--topic", "k_in", "--kind", "imu", "--count", "20", "--first", "1001", "--timeout-ms", "60000"],
    );
    let mut doomed = ns.cyclone("cyclone pub (killed)", &["pub", "imu", "/k_in", "100000", "0", "--rate", "50"]);
    std::thread::sleep(Duration::from_secs(3));
    doomed.sigkill();
    let next = ns.cyclone("cyclone pub", &["pub", "imu", "/k_in", "20", "0", "--first", "1001"]);
    next.expect("done", Duration::from_secs(30));
    streamed("cyclone pub killed, successor", &sub.expect("summary", Duration::from_secs(30)));
    sub.wait_success(Duration::from_secs(10));

    // 2. The shoal publisher killed: one Cyclone subscriber sees its stream, then its successor's.
    let mut csub =
        ns.cyclone("cyclone sub", &["sub", "imu", "/k_out", "20", "0", "--first", "1001", "--timeout", "60"]);
    wait_remote(&bridge, "k_out <->", "reader");
    let mut doomed = ns.shoal(
        "shoal pub (killed)",
        &["pub", "--topic", "k_out", "--kind", "imu", "--count", "100000", "--rate", "50"],
    );
    std::thread::sleep(Duration::from_secs(3));
    doomed.sigkill();
    let next = ns.shoal("shoal pub", &["pub", "--topic", "k_out", "--kind", "imu", "--count", "20", "--first", "1001"]);
    next.expect("done", Duration::from_secs(30));
    streamed("shoal pub killed, successor", &csub.expect("summary", Duration::from_secs(30)));
    csub.wait_success(Duration::from_secs(10));

    // 3. The receivers killed mid-stream (a Cyclone reader the bridge writes to reliably, a shoal subscriber the
    //    bridge publishes to): their successors get the next messages.
    let mut doomed_csub =
        ns.cyclone("cyclone sub (killed)", &["sub", "imu", "/k_out", "100000", "0", "--timeout", "60"]);
    wait_remote(&bridge, "k_out <->", "reader");
    let mut doomed_sub = ns.shoal(
        "shoal sub (killed)",
        &["sub", "--topic", "k_in", "--kind", "imu", "--count", "100000", "--timeout-ms", "60000"],
    );
    let spub = ns.shoal(
        "shoal pub (stream)",
        &["pub", "--topic", "k_out", "--kind", "imu", "--count", "150", "--first", "2001", "--rate", "50"],
    );
    let cpub =
        ns.cyclone("cyclone pub (stream)", &["pub", "imu", "/k_in", "150", "0", "--first", "2001", "--rate", "50"]);
    std::thread::sleep(Duration::from_secs(2));
    doomed_csub.sigkill();
    doomed_sub.sigkill();
    spub.expect("done", Duration::from_secs(30));
    cpub.expect("done", Duration::from_secs(30));
    ros_to_shoal_from(&ns, "imu", "k_in", 20, 0, "50", 3001);
    shoal_to_ros_from(&ns, &bridge, "imu", "k_out", 20, 0, "50", 3001);

    // Nothing was lost or refused on the bridge's side: every message of the streams that stayed alive (and those
    // the killed publishers got out) was forwarded.
    let fin = final_stats(&mut bridge);
    let (out, inn) = (route_stats(&fin, "k_out"), route_stats(&fin, "k_in"));
    eprintln!("bridge: {out}\n{inn}");
    for r in [&out, &inn] {
        let drops = r["dropped"].as_object().map(|m| m.values().filter_map(Value::as_u64).sum::<u64>());
        assert_eq!(drops, Some(0), "{r}");
    }
    assert!(out["to_ros"].as_u64().unwrap_or(0) > 20 + 150 + 20, "{out}");
    assert!(inn["to_shoal"].as_u64().unwrap_or(0) > 20 + 150 + 20, "{inn}");
    assert!(bridge.wait_exit(Duration::from_secs(10)).is_some_and(|s| s.success()), "the bridge exits cleanly");
}

#[test]
fn qos_mismatch_is_reported() {
    if !root_or_skip("qos_mismatch_is_reported") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("qs");
    let bridge = ns.bridge(&["--topic", "scan=std_msgs/msg/String,direction=ros_to_shoal"]);
    let _cpub = ns
        .cyclone("cyclone pub (best effort)", &["pub", "string", "/scan", "5", "0", "--best-effort", "--linger", "8"]);
    let v = bridge.expect_line("qos_mismatch", Duration::from_secs(20), |v| v["event"] == "qos_mismatch");
    eprintln!("reported: {v}");
    assert_eq!(v["offered"], "best_effort", "{v}");
    assert_eq!(v["requested"], "reliable", "{v}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("/scan") && m.contains("best_effort") && m.contains("remote writer")),
        "{v}"
    );
}

#[test]
fn cdr_matches_rosbags() {
    // No network: the bridge's CDR of every built-in type, compared byte for byte with rosbags' serializer.
    use shoal_ros2_bridge::mapping::ToRos;
    use shoal_ros2_bridge::{testdata as td, to_cdr};
    fn line<P: ToRos>(kind: &str, i: u32, size: usize, p: &P) -> String
    where
        P::Ros: serde::Serialize,
    {
        let bytes = to_cdr(&p.to_ros().expect("maps")).expect("encodes");
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("{kind} {i} {size} {hex}\n")
    }
    let telemetry = demo_mapping("demo.Telemetry").expect("demo.Telemetry maps to demo_msgs/msg/Telemetry");
    let mut text = String::new();
    for i in [1, 7, 300] {
        text += &line("string", i, 0, &td::string(i));
        text += &line("imu", i, 0, &td::imu(i));
        text += &line("image", i, 5000, &td::image(i, 5000));
        text += &line("pointcloud2", i, 1000, &td::pointcloud2(i, 1000));
        text += &line("pose_stamped", i, 0, &td::pose_stamped(i));
        text += &line("twist", i, 0, &td::twist(i));
        text += &line("transform_stamped", i, 0, &td::transform_stamped(i));
        text += &line("nav_sat_fix", i, 0, &td::nav_sat_fix(i));
        // The raw fallback: payload and type name as the bridge puts them into a UInt8MultiArray.
        let raw = shoal_ros2_bridge::bridge::raw_to_ros(RAW_TYPE, &td::raw(i, 1000)).expect("fits");
        let hex: String = to_cdr(&raw).expect("encodes").iter().map(|b| format!("{b:02x}")).collect();
        text += &format!("raw {i} 1000 {hex}\n");
        // A custom type through the generic mapping: demo.Telemetry as demo_msgs/msg/Telemetry (tests/demo/).
        let t = shoal_ros2_bridge::testdata::telemetry(i, 1000);
        let ros = telemetry.from_proto(&prost::Message::encode_to_vec(&t)).expect("fits");
        let hex: String = to_cdr(&ros).expect("encodes").iter().map(|b| format!("{b:02x}")).collect();
        text += &format!("telemetry {i} 1000 {hex}\n");
    }
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cdr_oracle_{}.txt", std::process::id()));
    std::fs::write(&file, text).expect("write");
    let out = Command::new(python())
        .arg(dir().join("tests/dds/peer.py"))
        .args(["oracle", file.to_str().expect("utf-8")])
        .output()
        .expect("run the oracle");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|_| panic!("oracle output: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    eprintln!("{v}");
    assert_eq!(v["passed"], 30, "{v}");
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(0), "{v}");
}

fn demo_dir() -> PathBuf {
    dir().join("tests/demo")
}

/// The generic mapping of protobuf `proto_name` (tests/demo/demo.proto) to demo_msgs/msg/Telemetry
/// (tests/demo/msg/).
fn demo_mapping(proto_name: &str) -> Result<shoal_ros2_bridge::generic::Mapping, String> {
    use shoal_ros2_bridge::generic::{Mapping, compile_proto};
    use shoal_ros2_bridge::msgdef::{MsgName, MsgRegistry};
    let desc = compile_proto(&demo_dir().join("demo.proto"), &[])?;
    let mut reg = MsgRegistry::new([demo_dir().join("msg")]);
    let ros = MsgName::parse("demo_msgs/msg/Telemetry")?;
    Mapping::new(&mut reg, &ros, proto_name, desc).map_err(|e| e.to_string())
}

/// A custom ROS 2 type from a `.msg` file, mapped to a `.proto` message by field names: Cyclone (an IDL-defined
/// type, checked against rosbags' bytes of the same `.msg`) → bridge → shoal, and shoal → bridge → Cyclone. The
/// inbound route comes from a configuration file (msg_path, shoal_proto), the outbound one from flags
/// (--msg-path, shoal_proto=).
#[test]
fn generic_mapping_both_ways() {
    if !root_or_skip("generic_mapping_both_ways") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("gm");
    let cfg = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("generic_{}.toml", std::process::id()));
    let demo = demo_dir();
    std::fs::write(
        &cfg,
        format!(
            "[ros]\nmsg_path = [\"{msg}\"]\n\n[[topic]]\nshoal = \"tel_in\"\ntype = \"demo_msgs/msg/Telemetry\"\n\
             direction = \"ros_to_shoal\"\nshoal_type = \"demo.Telemetry\"\nshoal_proto = \"{proto}\"\n",
            msg = demo.join("msg").display(),
            proto = demo.join("demo.proto").display()
        ),
    )
    .expect("write the configuration");
    let out = format!(
        "tel_out=demo_msgs/msg/Telemetry,direction=shoal_to_ros,shoal_type=demo.Telemetry,shoal_proto={}",
        demo.join("demo.proto").display()
    );
    let msg_dir = demo.join("msg").display().to_string();
    let mut bridge = ns.bridge(&["--config", cfg.to_str().expect("utf-8"), "--msg-path", &msg_dir, "--topic", &out]);
    let s = ros_to_shoal(&ns, &bridge, "telemetry", "tel_in", 30, 200, "100");
    // The shoal side announces the configured protobuf message with its descriptor, which decodes the payloads.
    assert_eq!(s["type"]["name"], "demo.Telemetry", "{s}");
    assert_eq!(s["type"]["encoding"], "proto", "{s}");
    assert_eq!(s["type"]["decoded"]["wheels"][3]["name"], "w3", "{s}");
    assert_eq!(s["type"]["decoded"]["header"]["stamp"]["sec"], 30, "{s}");
    shoal_to_ros(&ns, &bridge, "telemetry", "tel_out", 30, 200, "100");
    // 1 MB of blob in each direction.
    ros_to_shoal(&ns, &bridge, "telemetry", "tel_in", 5, 1 << 20, "10");
    shoal_to_ros(&ns, &bridge, "telemetry", "tel_out", 5, 1 << 20, "10");
    let fin = final_stats(&mut bridge);
    let (inn, outr) = (route_stats(&fin, "tel_in"), route_stats(&fin, "tel_out"));
    assert_eq!(inn["to_shoal"], 35, "{inn}");
    assert_eq!(outr["to_ros"], 35, "{outr}");
    for r in [&inn, &outr] {
        let drops = r["dropped"].as_object().map(|m| m.values().filter_map(Value::as_u64).sum::<u64>());
        assert_eq!(drops, Some(0), "{r}");
    }
    let _ = std::fs::remove_file(&cfg);
}

/// A protobuf message that does not fit the ROS type stops the bridge at start, naming the first field that does
/// not match, before it joins either side.
#[test]
fn generic_mismatch_is_refused_at_start() {
    // The library's check, without a network.
    let e = demo_mapping("demo.BadTelemetry").expect_err("BadTelemetry does not map");
    assert!(e.starts_with("pose.position.w: no such field in geometry_msgs/msg/Point"), "{e}");
    if !root_or_skip("generic_mismatch_is_refused_at_start") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("gx");
    let demo = demo_dir();
    let msg_dir = demo.join("msg").display().to_string();
    let topic = format!(
        "bad=demo_msgs/msg/Telemetry,shoal_type=demo.BadTelemetry,shoal_proto={}",
        demo.join("demo.proto").display()
    );
    let mut p = Proc::spawn("bridge (mismatch)", ns.command(BRIDGE, &["--msg-path", &msg_dir, "--topic", &topic]));
    let status = p.wait_exit(Duration::from_secs(20)).expect("the bridge exits at once");
    assert!(!status.success(), "the bridge refuses the mapping");
    std::thread::sleep(Duration::from_millis(200)); // the stderr reader thread drains the pipe
    let err = p.stderr();
    assert!(
        err.contains(
            "protobuf demo.BadTelemetry does not map to demo_msgs/msg/Telemetry: pose.position.w: no such field in \
             geometry_msgs/msg/Point (protobuf demo.BadPoint w has it, as double)"
        ),
        "{err}"
    );
}

/// A shoal → ROS 2 generic route without shoal_proto or shoal_descriptor takes the protobuf definition the shoal
/// publisher announces: the bridge waits for it at start and checks the mapping; without such a publisher it
/// stops with an error once `announced_type_wait_ms` has passed.
#[test]
fn generic_mapping_from_the_announced_descriptor() {
    if !root_or_skip("generic_mapping_from_the_announced_descriptor") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("ga");
    let msg_dir = demo_dir().join("msg").display().to_string();
    let route = "tel_ann=demo_msgs/msg/Telemetry,direction=shoal_to_ros,shoal_type=demo.Telemetry";

    // No publisher: refused after the wait.
    let cfg = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("announced_{}.toml", std::process::id()));
    std::fs::write(&cfg, "[shoal]\nannounced_type_wait_ms = 1500\n").expect("write the configuration");
    let args = ["--config", cfg.to_str().expect("utf-8"), "--msg-path", &msg_dir, "--topic", route];
    let mut p = Proc::spawn("bridge (no publisher)", ns.command(BRIDGE, &args));
    let status = p.wait_exit(Duration::from_secs(30)).expect("the bridge gives up");
    assert!(!status.success());
    std::thread::sleep(Duration::from_millis(200));
    let err = p.stderr();
    assert!(
        err.contains("shoal topic tel_ann: no publisher announced demo.Telemetry (encoding proto, with a descriptor) within 1500 ms"),
        "{err}"
    );
    let _ = std::fs::remove_file(&cfg);

    // A stream of 200 messages at 50 Hz, published before the bridge starts; the Cyclone subscriber checks
    // messages 101..=120 (by then the bridge's DDS writer has long matched it) against rosbags' bytes.
    let mut csub =
        ns.cyclone("cyclone sub", &["sub", "telemetry", "/tel_ann", "20", "100", "--first", "101", "--timeout", "60"]);
    let mut publ = ns.shoal(
        "shoal pub",
        &["pub", "--topic", "tel_ann", "--kind", "telemetry", "--count", "200", "--size", "100", "--rate", "50"],
    );
    let mut bridge = ns.bridge(&["--msg-path", &msg_dir, "--topic", route]);
    let summary = csub.expect("summary", Duration::from_secs(70));
    assert_all("shoal (announced descriptor) -> bridge -> cyclone, telemetry", &summary, 20);
    publ.expect("done", Duration::from_secs(30));
    publ.wait_success(Duration::from_secs(10));
    csub.wait_success(Duration::from_secs(10));
    let st = stats_of(&mut bridge, "tel_ann");
    assert!(st["to_ros"].as_u64().unwrap_or(0) >= 120, "{st}");
    let drops = st["dropped"].as_object().map(|m| m.values().filter_map(Value::as_u64).sum::<u64>());
    assert_eq!(drops, Some(0), "{st}");
}

/// A shoal publisher that restarts with a changed type mid-stream: `demo_v2.Telemetry` (another name, every field
/// renumbered, the same values) is read through a mapping of the descriptor it announces, so the Cyclone
/// subscriber gets messages 101..=120 byte for byte as rosbags writes them (through the route's mapping the values
/// would be read from the wrong fields, and the name alone was a type mismatch, every sample dropped until a
/// restart); then `demo.BadTelemetry`, which does not map, is refused: said once, each sample counted as
/// `type_changed`.
#[test]
fn generic_type_change_mid_stream_is_remapped_or_refused() {
    if !root_or_skip("generic_type_change_mid_stream_is_remapped_or_refused") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("gc");
    let msg_dir = demo_dir().join("msg").display().to_string();
    let route = "tel_chg=demo_msgs/msg/Telemetry,direction=shoal_to_ros,shoal_type=demo.Telemetry";
    let mut csub =
        ns.cyclone("cyclone sub", &["sub", "telemetry", "/tel_chg", "20", "100", "--first", "101", "--timeout", "90"]);
    let mut v1 = ns.shoal(
        "shoal pub v1",
        &["pub", "--topic", "tel_chg", "--kind", "telemetry", "--count", "100", "--size", "100", "--rate", "50"],
    );
    let mut bridge = ns.bridge(&["--msg-path", &msg_dir, "--topic", route]);
    v1.expect("done", Duration::from_secs(40));
    v1.wait_success(Duration::from_secs(10));
    let mut v2 = ns.shoal(
        "shoal pub v2",
        &[
            "pub",
            "--topic",
            "tel_chg",
            "--kind",
            "telemetry_v2",
            "--count",
            "100",
            "--first",
            "101",
            "--size",
            "100",
            "--rate",
            "50",
        ],
    );
    let summary = csub.expect("summary", Duration::from_secs(90));
    assert_all("shoal v1 then v2 (renumbered) -> bridge -> cyclone, telemetry", &summary, 20);
    v2.expect("done", Duration::from_secs(30));
    v2.wait_success(Duration::from_secs(10));
    csub.wait_success(Duration::from_secs(10));
    let remapped = bridge.expect_line("remapped", Duration::from_secs(5), |v| v["event"] == "type_changed");
    assert_eq!((remapped["type"].as_str(), remapped["result"].as_str()), (Some("demo_v2.Telemetry"), Some("remapped")));

    let mut bad = ns.shoal("shoal pub bad", &["pub", "--topic", "tel_chg", "--kind", "bad_telemetry", "--count", "5"]);
    bad.expect("done", Duration::from_secs(30));
    bad.wait_success(Duration::from_secs(10));
    let refused = bridge.expect_line("refused", Duration::from_secs(10), |v| v["event"] == "type_changed");
    assert_eq!((refused["type"].as_str(), refused["result"].as_str()), (Some("demo.BadTelemetry"), Some("refused")));
    let why = refused["message"].as_str().unwrap_or("");
    assert!(why.contains("does not map to demo_msgs/msg/Telemetry: pose.position.w"), "{refused}");
    std::thread::sleep(Duration::from_millis(500));
    let st = stats_of(&mut bridge, "tel_chg");
    assert_eq!(st["dropped"]["type_changed"].as_u64(), Some(5), "{st}");
    assert_eq!(st["dropped"]["type_mismatch"].as_u64(), Some(0), "{st}");
    assert!(st["to_ros"].as_u64().unwrap_or(0) >= 200, "{st}");
}

/// One RTPS message holding one DATA_FRAG submessage to the SPDP participant reader (every DDS participant has
/// one, on the discovery multicast port) whose sample size claims `data_size` bytes: RustDDS 0.15.1 allocates
/// and zero-fills that size before checking anything (see `shoal_ros2_bridge::supervisor`).
fn hostile_data_frag(data_size: u32) -> Vec<u8> {
    const FRAGMENT_SIZE: u16 = 1024;
    let mut m = Vec::new();
    m.extend_from_slice(b"RTPS");
    m.extend_from_slice(&[2, 3]); // protocol version 2.3
    m.extend_from_slice(&[0x01, 0x10]); // vendor id
    m.extend_from_slice(&[0x5a; 12]); // the sender's GUID prefix
    let mut body = Vec::new();
    body.extend_from_slice(&0u16.to_le_bytes()); // extraFlags
    body.extend_from_slice(&28u16.to_le_bytes()); // octetsToInlineQos: none follows the fixed fields
    body.extend_from_slice(&[0x00, 0x01, 0x00, 0xc7]); // readerId: SPDP builtin participant reader
    body.extend_from_slice(&[0x00, 0x01, 0x00, 0xc2]); // writerId: SPDP builtin participant writer
    body.extend_from_slice(&0i32.to_le_bytes()); // writerSN high
    body.extend_from_slice(&1u32.to_le_bytes()); // writerSN low
    body.extend_from_slice(&1u32.to_le_bytes()); // fragmentStartingNum
    body.extend_from_slice(&1u16.to_le_bytes()); // fragmentsInSubmessage
    body.extend_from_slice(&FRAGMENT_SIZE.to_le_bytes()); // fragmentSize
    body.extend_from_slice(&data_size.to_le_bytes()); // sampleSize: what gets allocated
    let mut payload = vec![0u8; usize::from(FRAGMENT_SIZE)];
    payload[..4].copy_from_slice(&[0x00, 0x03, 0x00, 0x00]); // PL_CDR_LE
    body.extend_from_slice(&payload);
    m.push(0x16); // DATA_FRAG
    m.push(0x01); // little endian
    m.extend_from_slice(&u16::try_from(body.len()).expect("small").to_le_bytes());
    m.extend_from_slice(&body);
    m
}

/// A DATA_FRAG declaring a 4 GiB sample, sent to the bridge's DDS ports (domain 0: the SPDP multicast port 7400
/// and the unicast discovery ports 7410 + 2 * participant id): the worker's allocation fails under the memory
/// limit, the supervisor restarts it with the same routes, and the bridge forwards again, its peak RSS far
/// below the 4 GiB it was told to allocate.
#[test]
fn hostile_data_frag_costs_a_restart_not_the_memory() {
    if !root_or_skip("hostile_data_frag_costs_a_restart_not_the_memory") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("hf");
    let mut bridge =
        Proc::spawn("bridge", ns.command(BRIDGE, &["--topic", "hf_out=std_msgs/msg/String,direction=shoal_to_ros"]));
    let lines = bridge.until("ready", Duration::from_secs(20));
    let first = lines.iter().find(|v| v["event"] == "worker_started").expect("the supervisor started a worker");
    eprintln!("{first}");
    assert_eq!(first["memory_limit"], 1u64 << 30, "{first}");
    // Forwarding works before.
    shoal_to_ros(&ns, &bridge, "string", "hf_out", 10, 0, "100");

    let hex: String = hostile_data_frag(0xFFFF_FFF0).iter().map(|b| format!("{b:02x}")).collect();
    let send = "import socket, sys\n\
                p = bytes.fromhex(sys.argv[1])\n\
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)\n\
                s.sendto(p, ('239.255.0.1', 7400))\n\
                for port in range(7410, 7420, 2):\n    s.sendto(p, ('127.0.0.1', port))\n";
    let py = python();
    let out = ns.command(&py, &["-c", send, &hex]).output().expect("run the sender");
    assert!(out.status.success(), "sender: {}", String::from_utf8_lossy(&out.stderr));

    let exited = bridge.expect("worker_exited", Duration::from_secs(20));
    eprintln!("after the hostile DATA_FRAG: {exited}");
    assert_eq!(exited["signal"], libc::SIGABRT, "the allocation failed and aborted the worker: {exited}");
    assert_eq!(exited["restarts"], 1, "{exited}");
    let peak = exited["peak_rss_bytes"].as_u64().expect("peak RSS");
    assert!(peak < 1 << 30, "the worker's peak RSS ({peak} bytes) stayed under the limit, not 4 GiB");
    eprintln!("worker peak RSS with the 1 GiB limit: {:.1} MB", peak as f64 / 1e6);
    let said = "memory allocation of 4294967280 bytes failed";
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !bridge.stderr().contains(said) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(bridge.stderr().contains(said), "the worker said which allocation failed: {}", bridge.stderr());
    let again = bridge.expect("worker_started", Duration::from_secs(10));
    assert_eq!(again["restarts"], 1, "{again}");
    bridge.expect("ready", Duration::from_secs(20));
    // The same route forwards again.
    shoal_to_ros_from(&ns, &bridge, "string", "hf_out", 10, 0, "100", 101);
    let st = stats_of(&mut bridge, "hf_out");
    assert_eq!(st["to_ros"], 10, "the restarted worker forwarded: {st}");
    assert!(bridge.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()), "the supervisor exits cleanly");
}

/// `durability = transient_local` maps to shoal's history for late joiners both ways. ROS 2 → shoal: the bridge's
/// shoal publisher keeps the route's `history_depth` of what a Cyclone writer sent for a shoal subscriber that joins
/// later. shoal → ROS 2: a shoal publisher with a history publishes before the bridge exists; the bridge's shoal
/// subscriber asks for the kept messages and its transient-local DDS writer keeps them for a Cyclone reader that
/// joins later. (A Cyclone transient-local writer that published before the bridge existed gave the bridge's
/// RustDDS reader only its last sample in this setup, so the ROS 2 side here publishes to a running bridge.)
#[test]
fn transient_local_maps_to_history_for_late_joiners_both_ways() {
    if !root_or_skip("transient_local_maps_to_history_for_late_joiners_both_ways") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("tl");
    // shoal → ROS 2: a shoal publisher that keeps 5, with no subscriber yet.
    let spub = ns.shoal(
        "shoal pub with history",
        &["pub", "--topic", "latched_out", "--kind", "string", "--count", "10", "--rate", "100", "--history", "5"]
            .into_iter()
            .chain(["--wait-subs", "0", "--linger-ms", "30000"])
            .collect::<Vec<_>>(),
    );
    spub.expect("done", Duration::from_secs(20));
    let bridge = ns.bridge(&[
        "--topic",
        "latched_in=std_msgs/msg/String,direction=ros_to_shoal,durability=transient_local,history_depth=5",
        "--topic",
        "latched_out=std_msgs/msg/String,direction=shoal_to_ros,durability=transient_local,history_depth=5",
    ]);
    // ROS 2 → shoal: a Cyclone transient-local writer sends 10 to the bridge, with no shoal subscriber yet.
    let cpub = ns.cyclone(
        "cyclone transient-local pub",
        &["pub", "string", "/latched_in", "10", "0", "--transient-local", "--rate", "100", "--linger", "20"],
    );
    cpub.expect("done", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(1));
    let mut ssub = ns.shoal(
        "late shoal sub",
        &["sub", "--topic", "latched_in", "--kind", "string", "--count", "5", "--first", "6", "--timeout-ms", "20000"]
            .into_iter()
            .chain(["--history"])
            .collect::<Vec<_>>(),
    );
    let s = ssub.expect("summary", Duration::from_secs(30));
    assert_all("cyclone (transient local) -> bridge -> late shoal sub with history", &s, 5);
    let mut csub = ns.cyclone(
        "late cyclone transient-local sub",
        &["sub", "string", "/latched_out", "5", "0", "--first", "6", "--transient-local", "--timeout", "20"],
    );
    let s = csub.expect("summary", Duration::from_secs(30));
    assert_all("shoal pub with history -> bridge -> late cyclone transient-local sub", &s, 5);
    ssub.wait_success(Duration::from_secs(10));
    csub.wait_success(Duration::from_secs(10));
    let mut bridge = bridge;
    let st = stats_of(&mut bridge, "latched_out");
    assert_eq!(st["to_ros"], 5, "the bridge got the shoal publisher's 5 kept messages: {st}");
    drop(spub);
    drop(cpub);
}

/// The `--service` flag of service `kind` under shoal name `name`, served on side `server` (shoal or ros).
fn service_flag(kind: &str, name: &str, server: &str, extra: &str) -> String {
    let ty = match kind {
        "trigger" => "std_srvs/srv/Trigger".to_string(),
        "set_bool" => "std_srvs/srv/SetBool".to_string(),
        "empty" => "std_srvs/srv/Empty".to_string(),
        "scale" => format!(
            "demo_msgs/srv/Scale,shoal_request=demo.Scale_Request,shoal_response=demo.Scale_Response,shoal_proto={}",
            demo_dir().join("demo.proto").display()
        ),
        _ => panic!("unknown kind {kind}"),
    };
    format!("{name}={ty},server={server}{extra}")
}

/// The counters of service `name` (shoal name) in a statistics line.
fn service_stats(line: &Value, name: &str) -> Value {
    line["services"]
        .as_array()
        .and_then(|ss| ss.iter().find(|s| s["service"].as_str().is_some_and(|n| n.starts_with(&format!("{name} ")))))
        .cloned()
        .unwrap_or_else(|| panic!("no service {name} in {line}"))
}

/// A ROS 2 client (Cyclone, as rmw_cyclonedds) calls shoal services through the bridge, and a shoal client calls
/// ROS 2 services (Cyclone servers), for the built-in std_srvs types and a generic .srv; every answer is checked
/// against what the server must have answered. The round trip of each is printed beside a direct Cyclone client
/// → Cyclone server call of the same type, in the same namespace.
#[test]
fn services_both_ways_against_cyclone() {
    if !root_or_skip("services_both_ways_against_cyclone") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("srv");
    let msg_dir = demo_dir().join("msg").display().to_string();
    let count = 20u64;
    let c = count.to_string();
    let kinds = ["trigger", "set_bool", "empty", "scale"];
    let mut args = vec!["--msg-path".to_string(), msg_dir];
    for k in kinds {
        args.push("--service".into());
        args.push(service_flag(k, &format!("{k}_sh"), "shoal", ""));
        args.push("--service".into());
        args.push(service_flag(k, &format!("{k}_ros"), "ros", ""));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut bridge = ns.bridge(&args);
    let mut table = Vec::new();
    for k in kinds {
        // Cyclone client → bridge → shoal server.
        let name = format!("{k}_sh");
        let server = ns.shoal("shoal server", &["serve", "--service", &name, "--kind", k]);
        let mut client = ns.cyclone("cyclone client", &["srv_client", k, &format!("/{name}"), &c]);
        let s = client.expect("summary", Duration::from_secs(60));
        eprintln!("cyclone client -> bridge -> shoal server, {k}: {s}");
        assert_eq!(s["answered"], count, "{k}: every call answered: {s}");
        assert_eq!(s["intact"], count, "{k}: every answer the shoal server's: {s}");
        client.wait_success(Duration::from_secs(10));
        drop(server);
        table.push((k, "ROS 2 client -> shoal server", s["answered"].clone(), s["p50_us"].clone()));

        // shoal client → bridge → Cyclone server.
        let name = format!("{k}_ros");
        let server = ns.cyclone("cyclone server", &["srv_server", k, &format!("/{name}"), "--timeout", "60"]);
        let mut client = ns.shoal("shoal client", &["call", "--service", &name, "--kind", k, "--count", &c]);
        let s = client.expect("summary", Duration::from_secs(60));
        eprintln!("shoal client -> bridge -> cyclone server, {k}: {s}");
        assert_eq!(s["answered"], count, "{k}: every call answered: {s}");
        assert_eq!(s["intact"], count, "{k}: every answer the Cyclone server's: {s}");
        client.wait_success(Duration::from_secs(10));
        drop(server);
        table.push((k, "shoal client -> ROS 2 server", s["answered"].clone(), s["p50_us"].clone()));

        // The reference: Cyclone client → Cyclone server, no bridge.
        let server = ns.cyclone("cyclone server", &["srv_server", k, "/direct", "--timeout", "60"]);
        let client = ns.cyclone("cyclone client", &["srv_client", k, "/direct", &c]);
        let s = client.expect("summary", Duration::from_secs(60));
        assert_eq!(s["intact"], count, "{k}: the direct reference works: {s}");
        drop(server);
        table.push((k, "ROS 2 client -> ROS 2 server (direct)", s["answered"].clone(), s["p50_us"].clone()));
    }
    eprintln!("service | path | answered of {count} | round trip P50 (us)");
    for (k, path, answered, p50) in &table {
        eprintln!("{k} | {path} | {answered} | {p50}");
    }
    let st = final_stats(&mut bridge);
    for k in kinds {
        for side in ["sh", "ros"] {
            let s = service_stats(&st, &format!("{k}_{side}"));
            assert_eq!(s["calls"], count, "{s}");
            assert_eq!(s["answered"], count, "{s}");
        }
    }
}

/// A call that times out on one side times out on the other: a shoal server slower than the bridge's timeout
/// leaves the ROS 2 client without a reply, and a ROS 2 server slower than the shoal client's timeout leaves the
/// shoal client timed out; the bridge counts both. With no server at all, a shoal client's call fails at once.
#[test]
fn service_timeouts_cross_the_bridge() {
    if !root_or_skip("service_timeouts_cross_the_bridge") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("srvto");
    let slow_sh = service_flag("set_bool", "slow_sh", "shoal", ",timeout_ms=500");
    let slow_ros = service_flag("set_bool", "slow_ros", "ros", ",timeout_ms=3000");
    let none = service_flag("trigger", "none_ros", "ros", "");
    let mut bridge = ns.bridge(&["--service", &slow_sh, "--service", &slow_ros, "--service", &none]);

    // The shoal server answers after 1.5 s; the bridge gives up at 0.5 s and sends no reply.
    let server =
        ns.shoal("slow shoal server", &["serve", "--service", "slow_sh", "--kind", "set_bool", "--delay-ms", "1500"]);
    let client = ns.cyclone("cyclone client", &["srv_client", "set_bool", "/slow_sh", "2", "--timeout-ms", "2500"]);
    let s = client.expect("summary", Duration::from_secs(60));
    eprintln!("cyclone client -> bridge -> slow shoal server: {s}");
    assert_eq!(s["answered"], 0, "no reply after the bridge's timeout: {s}");
    assert_eq!(s["timed_out"], 2, "{s}");
    drop(server);

    // The Cyclone server answers after 1.5 s; the shoal client waits 0.8 s.
    let server = ns.cyclone("slow cyclone server", &["srv_server", "set_bool", "/slow_ros", "--delay-ms", "1500"]);
    let client = ns.shoal(
        "shoal client",
        &["call", "--service", "slow_ros", "--kind", "set_bool", "--count", "2", "--timeout-ms", "800"],
    );
    let s = client.expect("summary", Duration::from_secs(60));
    eprintln!("shoal client -> bridge -> slow cyclone server: {s}");
    assert_eq!(s["answered"], 0, "{s}");
    assert_eq!(s["timed_out"], 2, "the shoal client's call timed out: {s}");
    drop(server);

    // No ROS 2 server of /none_ros: the call fails at once, saying so.
    let client = ns.shoal(
        "shoal client",
        &["call", "--service", "none_ros", "--kind", "trigger", "--count", "1", "--timeout-ms", "3000"],
    );
    let s = client.expect("summary", Duration::from_secs(30));
    eprintln!("shoal client -> bridge -> no ROS 2 server: {s}");
    assert_eq!(s["answered"], 0, "{s}");
    assert!(s["failed"][0].as_str().is_some_and(|m| m.contains("no ROS 2 server of /none_ros")), "{s}");

    let st = final_stats(&mut bridge);
    let sh = service_stats(&st, "slow_sh");
    assert_eq!(sh["timed_out"], 2, "{sh}");
    let ros = service_stats(&st, "slow_ros");
    assert_eq!(ros["calls"], 2, "{ros}");
    // The bridge waits up to its own timeout_ms (3 s): the first reply (at 1.5 s) reached it after the shoal client
    // had given up; the second may still be on its way when the bridge stops.
    assert!(ros["answered"].as_u64().is_some_and(|n| n >= 1), "{ros}");
    assert_eq!(service_stats(&st, "none_ros")["no_server"], 1, "{st}");
}

/// A ROS 2 action that DDS discovery shows is listed as not bridged, once, with its type.
#[test]
fn discovered_actions_are_listed_as_not_bridged() {
    if !root_or_skip("discovered_actions_are_listed_as_not_bridged") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("act");
    let bridge = ns.bridge(&["--service", "reset=std_srvs/srv/Trigger,server=shoal"]);
    let _action = ns.cyclone("cyclone action server", &["action_server", "/fibonacci"]);
    let line = bridge.expect_line("not_bridged", Duration::from_secs(20), |v| v["event"] == "not_bridged");
    assert_eq!(line["kind"], "action", "{line}");
    assert_eq!(line["name"], "/fibonacci", "{line}");
    assert_eq!(line["type"], "example_interfaces/action/Fibonacci", "{line}");
    assert!(line["message"].as_str().is_some_and(|m| m.contains("is not bridged")), "{line}");
}

/// A bridge configuration file with `text`, in a fresh temporary directory named after `tag`.
fn config_file(tag: &str, text: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("shoal_bridge_{tag}_{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    let p = d.join("bridge.toml");
    std::fs::write(&p, text).expect("config file");
    p
}

/// The bridge's lines up to the first satisfying `pred` (within `timeout`), all of them.
fn lines_until(bridge: &Proc, what: &str, timeout: Duration, mut pred: impl FnMut(&Value) -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    bridge.expect_line(what, timeout, |v| {
        seen.push(v.clone());
        pred(v)
    });
    seen
}

fn is_event(v: &Value, event: &str, ros: &str) -> bool {
    v["event"] == event && v["ros"] == ros
}

#[test]
fn automatic_routes_follow_discovery_without_loops() {
    if !root_or_skip("automatic_routes_follow_discovery_without_loops") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("au");
    let cfg = config_file(
        "au",
        "[shoal]\nstats_interval_ms = 500\n\n[auto]\nallow = \"/auto_.*\"\ndeny = \"/auto_denied\"\ngrace_ms = 500\n",
    );
    let msg = demo_dir().join("msg");
    let mut bridge =
        ns.bridge(&["--config", cfg.to_str().expect("utf-8 path"), "--msg-path", msg.to_str().expect("utf-8 path")]);
    let mut lines = Vec::new();

    // Topics that must not be bridged: not matching allow, and matching deny. Best effort: they wait for no reader.
    let quiet = |topic: &str| {
        ns.cyclone(
            &format!("cyclone pub {topic}"),
            &["pub", "string", topic, "5", "0", "--best-effort", "--linger", "6"],
        )
    };
    let _plain = quiet("/plain_chat");
    let _denied = quiet("/auto_denied");

    // ROS 2 → shoal: a Cyclone publisher started after the bridge, on a matching topic.
    let mut sub = ns.shoal(
        "shoal sub",
        &["sub", "--topic", "auto_chat", "--kind", "string", "--count", "20", "--timeout-ms", "60000"],
    );
    let mut publ =
        ns.cyclone("cyclone pub", &["pub", "string", "/auto_chat", "20", "0", "--rate", "20", "--delay", "3"]);
    lines.extend(lines_until(&bridge, "route_added /auto_chat", Duration::from_secs(20), |v| {
        is_event(v, "route_added", "/auto_chat")
    }));
    let added = lines.last().cloned().expect("a line");
    eprintln!("{added}");
    assert_eq!(added["direction"], "ros_to_shoal", "{added}");
    assert_eq!(added["type"], "std_msgs/msg/String", "{added}");
    assert_eq!(added["shoal"], "auto_chat", "{added}");
    assert_eq!(added["qos"]["reliability"], "reliable", "the reader takes the writer's QoS: {added}");
    // Beside the bridge, a Cyclone subscriber on the same topic sees every message once: the bridge does not
    // bridge its own shoal publisher back to ROS 2 (no DDS writer of its own on /auto_chat).
    let csub = ns.cyclone("cyclone sub", &["sub", "string", "/auto_chat", "20", "0", "--timeout", "30"]);
    assert_eq!(publ.expect("done", Duration::from_secs(60))["sent"], 20);
    let s = sub.expect("summary", Duration::from_secs(60));
    assert_all("cyclone -> automatic route -> shoal", &s, 20);
    assert_eq!(s["type"]["name"], "std_msgs.String", "the built-in type: {s}");
    assert_eq!(s["type"]["decoded"]["data"], "hello 20", "{s}");
    let c = csub.expect("summary", Duration::from_secs(40));
    assert_all("cyclone sub beside the bridge", &c, 20);
    sub.wait_success(Duration::from_secs(10));
    publ.wait_success(Duration::from_secs(15));
    // The publisher is gone: so is the route.
    lines.extend(lines_until(&bridge, "route_removed /auto_chat", Duration::from_secs(20), |v| {
        is_event(v, "route_removed", "/auto_chat")
    }));
    // A new publisher: a new route; the old one's reader and shoal publisher are gone with it (if they were not,
    // each message would arrive twice).
    let mut sub = ns.shoal(
        "shoal sub",
        &["sub", "--topic", "auto_chat", "--kind", "string", "--count", "20", "--timeout-ms", "60000", "--first", "21"],
    );
    let mut publ = ns.cyclone(
        "cyclone pub",
        &["pub", "string", "/auto_chat", "20", "0", "--rate", "20", "--delay", "3", "--first", "21"],
    );
    lines.extend(lines_until(&bridge, "route_added /auto_chat again", Duration::from_secs(20), |v| {
        is_event(v, "route_added", "/auto_chat")
    }));
    assert_eq!(publ.expect("done", Duration::from_secs(60))["sent"], 20);
    assert_all("cyclone -> automatic route again -> shoal", &sub.expect("summary", Duration::from_secs(60)), 20);
    sub.wait_success(Duration::from_secs(10));
    publ.wait_success(Duration::from_secs(15));
    lines.extend(lines_until(&bridge, "route_removed /auto_chat again", Duration::from_secs(20), |v| {
        is_event(v, "route_removed", "/auto_chat")
    }));

    // A type that is not built in, its .msg under --msg-path: a generic mapping of a protobuf message made from the
    // .msg (demo_msgs.Telemetry); every rosbags-made sample decodes and goes to shoal.
    let mut tpub =
        ns.cyclone("cyclone pub", &["pub", "telemetry", "/auto_tele", "10", "64", "--rate", "20", "--delay", "3"]);
    lines.extend(lines_until(&bridge, "route_added /auto_tele", Duration::from_secs(20), |v| {
        is_event(v, "route_added", "/auto_tele")
    }));
    let added = lines.last().cloned().expect("a line");
    assert_eq!(added["type"], "demo_msgs/msg/Telemetry as demo_msgs.Telemetry", "{added}");
    assert_eq!(tpub.expect("done", Duration::from_secs(60))["sent"], 10);
    lines.extend(lines_until(&bridge, "auto_tele: 10 to shoal", Duration::from_secs(20), |v| {
        v["event"] == "stats"
            && v["routes"].as_array().is_some_and(|rs| {
                rs.iter().any(|r| {
                    r["route"].as_str().is_some_and(|n| n.starts_with("auto_tele <->"))
                        && r["to_shoal"] == 10
                        && r["dropped"]["cdr_decode"] == 0
                })
            })
    }));
    tpub.wait_success(Duration::from_secs(15));
    lines.extend(lines_until(&bridge, "route_removed /auto_tele", Duration::from_secs(20), |v| {
        is_event(v, "route_removed", "/auto_tele")
    }));

    // shoal → ROS 2: a shoal publisher started after the bridge, on a matching topic.
    let csub = ns.cyclone("cyclone sub", &["sub", "string", "/auto_out", "20", "0", "--timeout", "60"]);
    let mut spub = ns.shoal(
        "shoal pub",
        &["pub", "--topic", "auto_out", "--kind", "string", "--count", "20", "--rate", "20", "--delay-ms", "3000"],
    );
    lines.extend(lines_until(&bridge, "route_added /auto_out", Duration::from_secs(20), |v| {
        is_event(v, "route_added", "/auto_out")
    }));
    let added = lines.last().cloned().expect("a line");
    assert_eq!(added["direction"], "shoal_to_ros", "{added}");
    assert_eq!(added["type"], "std_msgs/msg/String", "the shipped protobuf std_msgs.String: {added}");
    assert_eq!(spub.expect("done", Duration::from_secs(60))["sent"], 20);
    let c = csub.expect("summary", Duration::from_secs(60));
    assert_all("shoal -> automatic route -> cyclone", &c, 20);
    spub.wait_success(Duration::from_secs(10));
    lines.extend(lines_until(&bridge, "route_removed /auto_out", Duration::from_secs(20), |v| {
        is_event(v, "route_removed", "/auto_out")
    }));

    let last = final_stats(&mut bridge);
    eprintln!("final: {last}");
    for v in &lines {
        if v["event"] == "route_added" {
            assert!(
                v["ros"] == "/auto_chat" || v["ros"] == "/auto_tele" || v["ros"] == "/auto_out",
                "only the matching topics: {v}"
            );
        }
    }
    let added: Vec<&Value> = lines.iter().filter(|v| v["event"] == "route_added").collect();
    assert_eq!(added.len(), 4, "one route at a time each, none back the other way: {added:?}");
    assert_eq!(last["auto"]["added"], 4, "{last}");
    assert_eq!(last["auto"]["removed"], 4, "{last}");
    assert_eq!(last["auto"]["routes"], 0, "{last}");
    let _ = std::fs::remove_dir_all(cfg.parent().expect("a directory"));
}

/// Two bridges on the same systems: A bridges shoal → ROS 2, B ROS 2 → shoal, both automatically on the same
/// names. Neither bridges the other's publications back (B not A's DDS writer: A's participant lists the hidden
/// marker node; A not B's shoal publisher: its process is a shoal-ros2-bridge), so nothing ping-pongs and every
/// subscriber sees every message once.
#[test]
fn two_bridges_do_not_ping_pong() {
    if !root_or_skip("two_bridges_do_not_ping_pong") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("pp");
    let cfg = |tag: &str, direction: &str| {
        config_file(tag, &format!("[auto]\nallow = \"/pp_.*\"\ndirection = \"{direction}\"\ngrace_ms = 500\n"))
    };
    let (ca, cb) = (cfg("ppa", "shoal_to_ros"), cfg("ppb", "ros_to_shoal"));
    let mut a = ns.bridge(&["--config", ca.to_str().expect("utf-8 path")]);
    let mut b = ns.bridge(&["--config", cb.to_str().expect("utf-8 path")]);
    let mut lines_a = Vec::new();

    // shoal → A → ROS 2: B leaves A's DDS writer alone, so the shoal subscriber gets each message once.
    let csub = ns.cyclone("cyclone sub", &["sub", "string", "/pp_x", "20", "0", "--timeout", "60"]);
    let mut ssub = ns
        .shoal("shoal sub", &["sub", "--topic", "pp_x", "--kind", "string", "--count", "20", "--timeout-ms", "60000"]);
    let mut spub = ns.shoal(
        "shoal pub",
        &["pub", "--topic", "pp_x", "--kind", "string", "--count", "20", "--rate", "20", "--delay-ms", "3000"],
    );
    lines_a
        .extend(lines_until(&a, "route_added /pp_x", Duration::from_secs(20), |v| is_event(v, "route_added", "/pp_x")));
    assert_eq!(spub.expect("done", Duration::from_secs(60))["sent"], 20);
    assert_all("shoal -> bridge A -> cyclone", &csub.expect("summary", Duration::from_secs(60)), 20);
    assert_all("shoal sub beside bridge A and B", &ssub.expect("summary", Duration::from_secs(60)), 20);
    spub.wait_success(Duration::from_secs(10));
    ssub.wait_success(Duration::from_secs(10));

    // ROS 2 → B → shoal: A leaves B's shoal publisher alone, so the Cyclone subscriber gets each message once.
    let mut ssub = ns
        .shoal("shoal sub", &["sub", "--topic", "pp_y", "--kind", "string", "--count", "20", "--timeout-ms", "60000"]);
    let csub = ns.cyclone("cyclone sub", &["sub", "string", "/pp_y", "20", "0", "--timeout", "60"]);
    let mut cpub = ns.cyclone("cyclone pub", &["pub", "string", "/pp_y", "20", "0", "--rate", "20", "--delay", "3"]);
    assert_eq!(cpub.expect("done", Duration::from_secs(60))["sent"], 20);
    assert_all("cyclone -> bridge B -> shoal", &ssub.expect("summary", Duration::from_secs(60)), 20);
    assert_all("cyclone sub beside bridge A and B", &csub.expect("summary", Duration::from_secs(60)), 20);
    ssub.wait_success(Duration::from_secs(10));
    cpub.wait_success(Duration::from_secs(15));

    // Both at once on /pp_z, each bridge's route started by a genuine peer: A's for a shoal publisher (1..20), B's
    // for a Cyclone publisher (101..120). Each drops what the other forwarded: every subscriber gets each message
    // once (the other side's as `other`), instead of A's 1..20 coming back to shoal through B and B's 101..120
    // back to ROS 2 through A, round and round.
    let mut ssub = ns
        .shoal("shoal sub", &["sub", "--topic", "pp_z", "--kind", "string", "--count", "20", "--timeout-ms", "60000"]);
    let csub = ns.cyclone("cyclone sub", &["sub", "string", "/pp_z", "20", "0", "--timeout", "60", "--first", "101"]);
    let mut spub = ns.shoal(
        "shoal pub",
        &["pub", "--topic", "pp_z", "--kind", "string", "--count", "20", "--rate", "20", "--delay-ms", "3000"],
    );
    let mut cpub = ns.cyclone(
        "cyclone pub",
        &["pub", "string", "/pp_z", "20", "0", "--rate", "20", "--delay", "3", "--first", "101"],
    );
    assert_eq!(spub.expect("done", Duration::from_secs(60))["sent"], 20);
    assert_eq!(cpub.expect("done", Duration::from_secs(60))["sent"], 20);
    let s = ssub.expect("summary", Duration::from_secs(60));
    assert_all("shoal sub on pp_z", &s, 20);
    let c = csub.expect("summary", Duration::from_secs(60));
    assert_all("cyclone sub on /pp_z", &c, 20);
    // The subscribers stop at their 20; what arrived of the other side's by then is some of 20, never more.
    assert!(s["other"].as_u64().unwrap_or(99) <= 20 && c["other"].as_u64().unwrap_or(99) <= 20, "{s} {c}");
    ssub.wait_success(Duration::from_secs(10));
    spub.wait_success(Duration::from_secs(10));
    cpub.wait_success(Duration::from_secs(15));

    let rest = |p: &mut Proc| {
        p.signal(libc::SIGTERM);
        lines_until(p, "final stats", Duration::from_secs(15), |v| v["event"] == "stats" && v["final"] == true)
    };
    lines_a.extend(rest(&mut a));
    let lines_b = rest(&mut b);
    let added = |lines: &[Value]| -> Vec<String> {
        lines
            .iter()
            .filter(|v| v["event"] == "route_added")
            .map(|v| v["ros"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(added(&lines_a), ["/pp_x", "/pp_z"], "bridge A bridged B's shoal publisher of /pp_y");
    assert_eq!(added(&lines_b), ["/pp_y", "/pp_z"], "bridge B bridged A's DDS writer of /pp_x");
    // Each saw the other's forwarded messages on /pp_z and dropped them (the statistics lines while it ran).
    let ignored = |lines: &[Value]| {
        lines
            .iter()
            .filter(|l| l["event"] == "stats")
            .filter_map(|l| {
                l["routes"]
                    .as_array()?
                    .iter()
                    .find(|r| r["route"].as_str().is_some_and(|n| n.starts_with("pp_z <->")))
                    .cloned()
            })
            .filter_map(|r| r["own_ignored"].as_u64())
            .max()
            .unwrap_or(0)
    };
    let (ia, ib) = (ignored(&lines_a), ignored(&lines_b));
    eprintln!("pp_z own_ignored: A {ia}, B {ib}");
    assert!(ia > 0 && ib > 0, "each bridge dropped the other's forwarded messages: A {ia}, B {ib}");
    for c in [ca, cb] {
        let _ = std::fs::remove_dir_all(c.parent().expect("a directory"));
    }
}

/// Two bridges, one offering ROS 2 service /x as shoal service x, the other shoal service x as ROS 2 service /x: a
/// call from either side is answered once by the real server and never goes round between the bridges (a bridge
/// calls no shoal server of a bridge).
#[test]
fn services_do_not_go_round_between_two_bridges() {
    if !root_or_skip("services_do_not_go_round_between_two_bridges") {
        return;
    }
    let _cores = shared();
    let ns = Netns::create("srvloop");
    let mut a = ns.bridge(&["--node-name", "bridge_a", "--service", "x=std_srvs/srv/SetBool,server=ros,ros=/x"]);
    let mut b = ns.bridge(&["--node-name", "bridge_b", "--service", "x=std_srvs/srv/SetBool,server=shoal,ros=/x"]);
    let server = ns.cyclone("cyclone server", &["srv_server", "set_bool", "/x", "--timeout", "15"]);
    std::thread::sleep(Duration::from_secs(1));
    let client = ns.cyclone("cyclone client", &["srv_client", "set_bool", "/x", "10"]);
    let s = client.expect("summary", Duration::from_secs(60));
    assert_eq!((s["answered"].as_u64(), s["intact"].as_u64()), (Some(10), Some(10)), "{s}");
    let client = ns.shoal("shoal client", &["call", "--service", "x", "--kind", "set_bool", "--count", "10"]);
    let s = client.expect("summary", Duration::from_secs(60));
    assert_eq!((s["answered"].as_u64(), s["intact"].as_u64()), (Some(10), Some(10)), "{s}");
    let served = server.expect("summary", Duration::from_secs(30));
    assert_eq!(served["served"], 20, "each call served once, none sent round: {served}");
    let (sa, sb) = (final_stats(&mut a), final_stats(&mut b));
    let x_b = service_stats(&sb, "x");
    assert_eq!(x_b["answered"], 0, "bridge B called no bridge's shoal server: {x_b}");
    assert_eq!(service_stats(&sa, "x")["answered"], 10, "{sa}");
}
