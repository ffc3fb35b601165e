//! Seeds of `ros2_cdr` (the input format is in `../../harness/ros2_cdr.rs`): the bridge's demo pair
//! (`demo.Telemetry` as `demo_msgs/msg/Telemetry`) and shipped types with the protobuf forms in
//! `bridge-ros2/proto/`, each as a protobuf payload and as the CDR the bridge writes for it; a type defined by the
//! input's `.msg` text; and descriptors that do not map or import themselves.

use std::path::{Path, PathBuf};

use prost_reflect::DynamicMessage;

use crate::generic::compile_proto;
use crate::harness::{Input, ROS_TYPES, to_cdr};
use crate::{Result, write};

fn bridge_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bridge-ros2")
}

fn ros_index(name: &str) -> usize {
    ROS_TYPES.iter().position(|t| *t == name).expect("a listed type")
}

/// The protobuf payload of `json` as message `name` of `descriptor`.
fn payload(descriptor: &[u8], name: &str, json: &str) -> Result<Vec<u8>> {
    let pool = prost_reflect::DescriptorPool::decode(descriptor)?;
    let desc = pool.get_message_by_name(name).ok_or_else(|| format!("no {name}"))?;
    let mut de = serde_json::Deserializer::from_str(json);
    let msg = DynamicMessage::deserialize(desc, &mut de)?;
    Ok(prost::Message::encode_to_vec(&msg))
}

/// Writes the pair as a protobuf seed and, through the bridge's mapping, as a CDR seed.
fn pair(dir: &Path, tag: &str, input: Input<'_>) -> Result<()> {
    write(dir, "ros2_cdr", &format!("{tag}_proto"), &input.to_bytes())?;
    let m = input.mapping().ok_or_else(|| format!("{tag}: the pair does not map"))?;
    let ros = m.from_proto(input.sample).map_err(|e| format!("{tag}: {e}"))?;
    let cdr = to_cdr(&ros)?;
    write(dir, "ros2_cdr", &format!("{tag}_cdr"), &Input { cdr: true, sample: &cdr, ..input }.to_bytes())
}

const TELEMETRY: &str = r#"{
  "header": {"stamp": {"sec": 5, "nanosec": 7}, "frame_id": "base"},
  "pose": {"position": {"x": 1.5, "y": -2, "z": 0.25}, "orientation": {"w": 1}},
  "wheels": [{"name": "fl", "speed": 1.25, "ticks": 10}, {"name": "fr", "slipping": true}, {"name": "rl"},
             {"name": "rr", "ticks": 4294967295}],
  "spare": [{"name": "s"}], "temperatures": [21.5, -3.25], "gyro": [0.1, 0.2, 0.3], "errors": [1, -2, 300],
  "name": "rover", "tags": ["a", "bb", ""], "blob": "AAECAwQ=", "mode": "MODE_DRIVE", "ok": true, "trim": -3,
  "flags": 7, "grade": 65, "volts": 12000, "seq": "-5", "counter": "18446744073709551615",
  "uptime": {"sec": 3600}
}"#;

pub(crate) fn ros2_seeds(dir: &Path) -> Result<()> {
    let demo = compile_proto(&bridge_dir().join("tests/demo/demo.proto"), &[])?;
    let telemetry = |sample: &'static [u8]| Input {
        ros: ros_index("demo_msgs/msg/Telemetry"),
        msg_text: String::new(),
        proto_name: "demo.Telemetry".into(),
        descriptor: &demo,
        cdr: false,
        sample,
    };
    let full = payload(&demo, "demo.Telemetry", TELEMETRY)?;
    pair(dir, "telemetry", Input { sample: &full, ..telemetry(b"") })?;
    pair(dir, "telemetry_empty", telemetry(b""))?;
    // Does not map (pose.position.w): the mapping is refused.
    write(
        dir,
        "ros2_cdr",
        "bad_telemetry",
        &Input { proto_name: "demo.BadTelemetry".into(), ..telemetry(b"") }.to_bytes(),
    )?;
    // A demo type for a shipped ROS type.
    let pose = payload(&demo, "demo.Pose", r#"{"position": {"x": 1, "y": 2, "z": 3}, "orientation": {"z": 1}}"#)?;
    pair(
        dir,
        "pose",
        Input {
            ros: ros_index("geometry_msgs/msg/Pose"),
            proto_name: "demo.Pose".into(),
            sample: &pose,
            ..telemetry(b"")
        },
    )?;

    // The shipped protobuf forms of the built-in types.
    let sensor = compile_proto(&bridge_dir().join("proto/sensor_msgs.proto"), &[])?;
    let shipped = |ros: &str, name: &str| Input {
        ros: ros_index(ros),
        msg_text: String::new(),
        proto_name: name.into(),
        descriptor: &sensor,
        cdr: false,
        sample: b"",
    };
    let imu = payload(
        &sensor,
        "sensor_msgs.Imu",
        r#"{"header": {"frame_id": "imu", "stamp": {"sec": 1}}, "orientation": {"w": 1},
            "orientation_covariance": [1,0,0,0,1,0,0,0,1], "linear_acceleration": {"z": 9.81}}"#,
    )?;
    pair(dir, "imu", Input { sample: &imu, ..shipped("sensor_msgs/msg/Imu", "sensor_msgs.Imu") })?;
    let image = payload(
        &sensor,
        "sensor_msgs.Image",
        r#"{"height": 2, "width": 3, "encoding": "mono8", "step": 3, "data": "AQIDBAUG"}"#,
    )?;
    pair(dir, "image", Input { sample: &image, ..shipped("sensor_msgs/msg/Image", "sensor_msgs.Image") })?;
    let cloud = payload(
        &sensor,
        "sensor_msgs.PointCloud2",
        r#"{"height": 1, "width": 1, "fields": [{"name": "x", "offset": 0, "datatype": 7, "count": 1}],
            "point_step": 4, "row_step": 4, "data": "AACAPw==", "is_dense": true}"#,
    )?;
    pair(
        dir,
        "pointcloud2",
        Input { sample: &cloud, ..shipped("sensor_msgs/msg/PointCloud2", "sensor_msgs.PointCloud2") },
    )?;

    // A type defined by the input: every kind of field, nested demo and shipped types.
    let tmp = std::env::temp_dir().join(format!("seedgen_ros2_{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    std::fs::write(
        tmp.join("fuzz.proto"),
        "syntax = \"proto3\"; package fz;\n\
         message W { string name = 1; double speed = 2; uint32 ticks = 3; bool slipping = 4; }\n\
         message Fuzz { repeated int64 a = 1; string s = 2; repeated W w = 3; bytes b = 4; repeated uint32 c = 5;\n\
           repeated string t = 6; float f = 7; sint32 i = 8; }\n",
    )?;
    let fz = compile_proto(&tmp.join("fuzz.proto"), &[])?;
    let _ = std::fs::remove_dir_all(&tmp);
    let msg = "int64[] a\nstring<=8 s\ndemo_msgs/Wheel[2] w\nbyte[<=16] b\nuint8[3] c\nstring[<=2] t\nfloat32 f\n\
               int16 i\n";
    let sample = payload(
        &fz,
        "fz.Fuzz",
        r#"{"a": ["1", "-9223372036854775808"], "s": "short", "w": [{"name": "a"}, {"ticks": 3}],
            "b": "AQI=", "c": [1, 2, 255], "t": ["x"], "f": 1.5, "i": -300}"#,
    )?;
    let custom = Input {
        ros: ros_index("fuzz_msgs/msg/Fuzz"),
        msg_text: msg.into(),
        proto_name: "fz.Fuzz".into(),
        descriptor: &fz,
        cdr: false,
        sample: &sample,
    };
    pair(dir, "custom", custom)?;

    // A set whose file imports itself, and two files importing each other (announced by a hostile publisher).
    for (tag, set) in
        [("self_import", import_cycle(&["a.proto"])), ("import_cycle", import_cycle(&["a.proto", "b.proto"]))]
    {
        write(
            dir,
            "ros2_cdr",
            tag,
            &Input { proto_name: "c.M".into(), descriptor: &set, ..telemetry(b"") }.to_bytes(),
        )?;
    }
    Ok(())
}

/// A `FileDescriptorSet` of `files` (package `c`), each importing the next publicly and the last the first; each
/// defines a message `M<i>`, the first `M`.
pub(crate) fn import_cycle(files: &[&str]) -> Vec<u8> {
    use prost_reflect::prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};
    let file = files
        .iter()
        .enumerate()
        .map(|(i, name)| FileDescriptorProto {
            name: Some((*name).into()),
            package: Some("c".into()),
            dependency: vec![files[(i + 1) % files.len()].into()],
            public_dependency: vec![0],
            message_type: vec![DescriptorProto {
                name: Some(if i == 0 { "M".into() } else { format!("M{i}") }),
                ..Default::default()
            }],
            syntax: Some("proto3".into()),
            ..Default::default()
        })
        .collect();
    prost::Message::encode_to_vec(&FileDescriptorSet { file })
}
