//! The ROS 2 messages as serde structs, fields in `.msg` order: serialized by `cdr-encoding` (RustDDS) they are the
//! XCDR1 bytes ROS 2 nodes send (every ROS message is a final struct; `T[N]` is a tuple, `T[]` a length-prefixed
//! sequence, `uint8[]` raw bytes). Checked against rosbags' serializer by `tests/cdr_oracle.rs`.

use serde::{Deserialize, Serialize};

/// `builtin_interfaces/msg/Time`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Time {
    pub sec: i32,
    pub nanosec: u32,
}

/// `std_msgs/msg/Header`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub stamp: Time,
    pub frame_id: String,
}

/// `std_msgs/msg/String`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StringMsg {
    pub data: String,
}

/// `std_msgs/msg/MultiArrayDimension`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MultiArrayDimension {
    pub label: String,
    pub size: u32,
    pub stride: u32,
}

/// `std_msgs/msg/MultiArrayLayout`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MultiArrayLayout {
    pub dim: Vec<MultiArrayDimension>,
    pub data_offset: u32,
}

/// `std_msgs/msg/UInt8MultiArray`: the raw fallback (the bytes, and the shoal type name in `layout.dim[0].label`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UInt8MultiArray {
    pub layout: MultiArrayLayout,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// `geometry_msgs/msg/Point`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    pub z: f64,
}

/// `geometry_msgs/msg/Vector3`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Vector3 {
    pub x: f64,
    pub y: f64,
    pub z: f64,
}

/// `geometry_msgs/msg/Quaternion`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Quaternion {
    pub x: f64,
    pub y: f64,
    pub z: f64,
    pub w: f64,
}

/// `geometry_msgs/msg/Pose`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pose {
    pub position: Point,
    pub orientation: Quaternion,
}

/// `geometry_msgs/msg/PoseStamped`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoseStamped {
    pub header: Header,
    pub pose: Pose,
}

/// `geometry_msgs/msg/Twist`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Twist {
    pub linear: Vector3,
    pub angular: Vector3,
}

/// `geometry_msgs/msg/Transform`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Transform {
    pub translation: Vector3,
    pub rotation: Quaternion,
}

/// `geometry_msgs/msg/TransformStamped`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TransformStamped {
    pub header: Header,
    pub child_frame_id: String,
    pub transform: Transform,
}

/// `sensor_msgs/msg/Imu`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Imu {
    pub header: Header,
    pub orientation: Quaternion,
    pub orientation_covariance: [f64; 9],
    pub angular_velocity: Vector3,
    pub angular_velocity_covariance: [f64; 9],
    pub linear_acceleration: Vector3,
    pub linear_acceleration_covariance: [f64; 9],
}

/// `sensor_msgs/msg/Image`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Image {
    pub header: Header,
    pub height: u32,
    pub width: u32,
    pub encoding: String,
    pub is_bigendian: u8,
    pub step: u32,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// `sensor_msgs/msg/PointField`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PointField {
    pub name: String,
    pub offset: u32,
    pub datatype: u8,
    pub count: u32,
}

/// `sensor_msgs/msg/PointCloud2`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PointCloud2 {
    pub header: Header,
    pub height: u32,
    pub width: u32,
    pub fields: Vec<PointField>,
    pub is_bigendian: bool,
    pub point_step: u32,
    pub row_step: u32,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    pub is_dense: bool,
}

/// `sensor_msgs/msg/NavSatStatus`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NavSatStatus {
    pub status: i8,
    pub service: u16,
}

/// `sensor_msgs/msg/NavSatFix`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NavSatFix {
    pub header: Header,
    pub status: NavSatStatus,
    pub latitude: f64,
    pub longitude: f64,
    pub altitude: f64,
    pub position_covariance: [f64; 9],
    pub position_covariance_type: u8,
}

macro_rules! ros_messages {
    ($($t:ty),*) => { $(impl ros2_client::Message for $t {})* };
}
ros_messages!(
    Time,
    Header,
    StringMsg,
    UInt8MultiArray,
    Point,
    Vector3,
    Quaternion,
    Pose,
    PoseStamped,
    Twist,
    Transform,
    TransformStamped,
    Imu,
    Image,
    PointCloud2,
    NavSatFix
);
