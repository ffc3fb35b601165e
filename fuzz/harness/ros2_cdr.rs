//! The body of the `ros2_cdr` fuzz target: the ROS 2 bridge's generic mapping (`bridge-ros2/src/generic.rs` and
//! `msgdef.rs`) between a protobuf message, whose descriptor a shoal publisher announces over the network, and a
//! ROS 2 type, fed with CDR samples (what the bridge's DDS reader gets from any DDS writer) and protobuf payloads
//! (what its shoal subscriber gets). Shared (`#[path]`) by `fuzz_targets/ros2_cdr.rs`, which compiles the
//! bridge's two files into itself (the target does not link RustDDS), by `seedgen`, and by
//! `bridge-ros2/tests/fuzz_ros2_cdr.rs`, which runs the committed seeds through it against the bridge library.
//! The includer declares `generic` and `msgdef` beside this module.
//!
//! Input format (written by `seedgen`):
//! `[ros u8]` the ROS 2 type, an index into [`ROS_TYPES`] (modulo; the last, `fuzz_msgs/msg/Fuzz`, is defined by
//! the input's `.msg` text, its nested types from the shipped and the demo definitions),
//! `[msg_len u16 LE][.msg text]` (UTF-8, lossy), `[name_len u8][protobuf message name]`,
//! `[desc_len u16 LE][FileDescriptorSet]`, `[mode u8]`, then the sample: for an even mode a CDR sample (with its
//! 4-byte encapsulation header) read as the bridge's DDS reader reads it, for an odd mode a protobuf payload mapped
//! to the ROS type as the bridge's shoal subscriber maps it.
//!
//! Oracle: nothing panics or overflows the stack (descriptors with import cycles, recursive messages);
//! - a CDR sample that decodes is written again as CDR, which reads back to the same message (the same protobuf
//!   bytes) and is written again to the same CDR bytes; the message is one the shoal side accepts
//!   (`Mapping::from_message`), and its protobuf encoding maps back to the same message (ROS → protobuf loses
//!   nothing but the sign of a zero, which proto3 does not write);
//! - a protobuf payload that maps is written as CDR, read back, and written again to the same CDR bytes;
//! - a sequence claiming more elements than the sample's bytes can hold is an error before anything is allocated
//!   for it (the fuzz target also bounds the bytes allocated while one input runs).

use super::generic::{DynRos, Mapping};
use super::msgdef::{MsgName, MsgRegistry};

/// The ROS 2 types an input can pick; the last is defined by the input.
pub(crate) const ROS_TYPES: &[&str] = &[
    "demo_msgs/msg/Telemetry",
    "std_msgs/msg/String",
    "std_msgs/msg/Header",
    "geometry_msgs/msg/Pose",
    "geometry_msgs/msg/PoseStamped",
    "geometry_msgs/msg/Twist",
    "geometry_msgs/msg/TransformStamped",
    "sensor_msgs/msg/Imu",
    "sensor_msgs/msg/Image",
    "sensor_msgs/msg/PointCloud2",
    "sensor_msgs/msg/NavSatFix",
    "std_msgs/msg/UInt8MultiArray",
    "std_msgs/msg/Empty",
    "fuzz_msgs/msg/Fuzz",
];

/// The demo type pair of the bridge's tests (`bridge-ros2/tests/demo/msg/`).
const DEMO_MSGS: &[(&str, &str)] = &[
    ("Telemetry", include_str!("../../bridge-ros2/tests/demo/msg/demo_msgs/msg/Telemetry.msg")),
    ("Wheel", include_str!("../../bridge-ros2/tests/demo/msg/demo_msgs/msg/Wheel.msg")),
];

/// What one input did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// The protobuf message maps to the ROS type.
    pub(crate) mapped: bool,
    /// The sample decoded (CDR) or was accepted (protobuf).
    pub(crate) decoded: bool,
}

/// One input, taken apart.
pub(crate) struct Input<'a> {
    pub(crate) ros: usize,
    pub(crate) msg_text: String,
    pub(crate) proto_name: String,
    pub(crate) descriptor: &'a [u8],
    pub(crate) cdr: bool,
    pub(crate) sample: &'a [u8],
}

fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, rest) = data.split_at(n.min(data.len()));
    *data = rest;
    head
}

fn take_u16(data: &mut &[u8]) -> usize {
    let b = take(data, 2);
    usize::from(u16::from_le_bytes([b.first().copied().unwrap_or(0), b.get(1).copied().unwrap_or(0)]))
}

impl<'a> Input<'a> {
    pub(crate) fn parse(mut data: &'a [u8]) -> Input<'a> {
        let d = &mut data;
        let ros = usize::from(take(d, 1).first().copied().unwrap_or(0)) % ROS_TYPES.len();
        let n = take_u16(d);
        let msg_text = String::from_utf8_lossy(take(d, n)).into_owned();
        let n = usize::from(take(d, 1).first().copied().unwrap_or(0));
        let proto_name = String::from_utf8_lossy(take(d, n)).into_owned();
        let n = take_u16(d);
        let descriptor = take(d, n);
        let cdr = take(d, 1).first().copied().unwrap_or(0) % 2 == 0;
        Input { ros, msg_text, proto_name, descriptor, cdr, sample: data }
    }

    /// The input's bytes (what `seedgen` writes).
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![u8::try_from(self.ros).expect("an index")];
        let u16_of = |n: usize| u16::try_from(n).expect("fits the format").to_le_bytes();
        v.extend_from_slice(&u16_of(self.msg_text.len()));
        v.extend_from_slice(self.msg_text.as_bytes());
        v.push(u8::try_from(self.proto_name.len()).expect("fits the format"));
        v.extend_from_slice(self.proto_name.as_bytes());
        v.extend_from_slice(&u16_of(self.descriptor.len()));
        v.extend_from_slice(self.descriptor);
        v.push(if self.cdr { 0 } else { 1 });
        v.extend_from_slice(self.sample);
        v
    }

    /// The mapping the input names, as the bridge checks it at start.
    pub(crate) fn mapping(&self) -> Option<Mapping> {
        let mut reg = MsgRegistry::new([]);
        for (name, text) in DEMO_MSGS {
            reg.add_text(MsgName { pkg: "demo_msgs".into(), name: (*name).into() }, *text);
        }
        reg.add_text(MsgName { pkg: "fuzz_msgs".into(), name: "Fuzz".into() }, self.msg_text.clone());
        let ros = MsgName::parse(ROS_TYPES[self.ros]).expect("a valid name");
        Mapping::new(&mut reg, &ros, &self.proto_name, self.descriptor.to_vec()).ok()
    }
}

/// CDR little-endian with its encapsulation header, as a ROS 2 DDS writer writes a sample (`shoal_ros2_bridge::to_cdr`).
pub(crate) fn to_cdr(r: &DynRos) -> Result<Vec<u8>, String> {
    let body = cdr_encoding::to_vec::<_, byteorder::LittleEndian>(r).map_err(|e| e.to_string())?;
    let mut out = vec![0, 1, 0, 0];
    out.extend_from_slice(&body);
    Ok(out)
}

/// Runs one input (see the module docs).
pub(crate) fn run(data: &[u8]) -> Run {
    let input = Input::parse(data);
    let mut run = Run::default();
    let Some(m) = input.mapping() else { return run };
    run.mapped = true;
    if input.cdr {
        let Ok(r1) = m.decode_cdr(input.sample) else { return run };
        run.decoded = true;
        let c1 = to_cdr(&r1).expect("a decoded sample encodes");
        let r2 = m.decode_cdr(&c1).expect("the bridge reads what it writes");
        assert_eq!(r2.encode_proto(), r1.encode_proto(), "CDR round trip changed the message");
        assert_eq!(to_cdr(&r2).expect("encodes"), c1, "CDR written twice differs");
        let accepted = m.from_message(r1.msg.clone()).expect("a message read from DDS fits its own ROS type");
        assert_eq!(to_cdr(&accepted).expect("encodes"), c1, "from_message changed the message");
        // Compared as protobuf: proto3 does not write a -0.0 (prost takes it for the default), so the CDR of
        // the message mapped back may differ there, and only there.
        let back = m.from_proto(&r1.encode_proto()).expect("ROS -> protobuf -> ROS loses nothing");
        assert_eq!(back.encode_proto(), r1.encode_proto(), "the protobuf form maps back to another message");
    } else {
        let Ok(r1) = m.from_proto(input.sample) else { return run };
        run.decoded = true;
        let c1 = to_cdr(&r1).expect("a checked protobuf message encodes as CDR");
        let r2 = m.decode_cdr(&c1).expect("the bridge reads what it writes");
        assert_eq!(to_cdr(&r2).expect("encodes"), c1, "CDR written twice differs");
    }
    run
}
