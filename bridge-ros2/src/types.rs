//! The ROS 2 types the bridge knows: the built-in ones (a shipped protobuf message on the shoal side, mapped field
//! by field) and the raw fallback (`std_msgs/msg/UInt8MultiArray` carrying the shoal payload's bytes).

use std::fmt;
use std::sync::Arc;

use crate::generic::Mapping;
use crate::msgdef::MsgName;

/// What a route carries: a built-in type, or a generic mapping of a protobuf message to any ROS 2 type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteType {
    /// A built-in type (or the raw fallback).
    Builtin(RosType),
    /// A protobuf message mapped by field names to a ROS 2 type read from a `.msg` file.
    Generic(Arc<Mapping>),
    /// A generic mapping whose protobuf definition is the one the shoal topic's publisher announces (shoal → ROS 2
    /// routes without `shoal_proto` or `shoal_descriptor`); the bridge waits for it when it starts, then checks the
    /// mapping and carries on as [`RouteType::Generic`].
    Announced {
        /// The ROS 2 type (its `.msg` already found and parsed).
        ros: MsgName,
        /// The protobuf message the publisher must announce.
        shoal_type: String,
    },
}

impl RouteType {
    /// `(package, type)` of the ROS 2 name `package/msg/Type`.
    pub fn ros_name(&self) -> (&str, &str) {
        match self {
            RouteType::Builtin(t) => t.ros_name(),
            RouteType::Generic(m) => (&m.ros_name().pkg, &m.ros_name().name),
            RouteType::Announced { ros, .. } => (&ros.pkg, &ros.name),
        }
    }

    /// The name on the DDS wire, `package::msg::dds_::Type_`.
    pub fn dds_name(&self) -> String {
        let (p, t) = self.ros_name();
        format!("{p}::msg::dds_::{t}_")
    }

    /// Whether this is the raw fallback.
    pub fn is_raw(&self) -> bool {
        *self == RouteType::Builtin(RosType::Raw)
    }
}

impl fmt::Display for RouteType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteType::Builtin(t) => t.fmt(f),
            RouteType::Generic(m) => write!(f, "{} as {}", m.ros_name(), m.type_info().name),
            RouteType::Announced { ros, shoal_type } => write!(f, "{ros} as {shoal_type}"),
        }
    }
}

/// A ROS 2 message type the bridge can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RosType {
    /// `std_msgs/msg/String` ⇄ protobuf `std_msgs.String`.
    String,
    /// `std_msgs/msg/Header` ⇄ `std_msgs.Header`.
    Header,
    /// `builtin_interfaces/msg/Time` ⇄ `builtin_interfaces.Time`.
    Time,
    /// `geometry_msgs/msg/Pose` ⇄ `geometry_msgs.Pose`.
    Pose,
    /// `geometry_msgs/msg/PoseStamped` ⇄ `geometry_msgs.PoseStamped`.
    PoseStamped,
    /// `geometry_msgs/msg/Twist` ⇄ `geometry_msgs.Twist`.
    Twist,
    /// `geometry_msgs/msg/TransformStamped` ⇄ `geometry_msgs.TransformStamped`.
    TransformStamped,
    /// `sensor_msgs/msg/Imu` ⇄ `sensor_msgs.Imu`.
    Imu,
    /// `sensor_msgs/msg/Image` ⇄ `sensor_msgs.Image`.
    Image,
    /// `sensor_msgs/msg/PointCloud2` ⇄ `sensor_msgs.PointCloud2`.
    PointCloud2,
    /// `sensor_msgs/msg/NavSatFix` ⇄ `sensor_msgs.NavSatFix`.
    NavSatFix,
    /// `std_msgs/msg/UInt8MultiArray` ⇄ any shoal payload: the bytes in `data`, the shoal type name in
    /// `layout.dim[0].label`.
    Raw,
}

impl RosType {
    /// Every type, in the order the documentation lists them.
    pub const ALL: [RosType; 12] = [
        RosType::String,
        RosType::Header,
        RosType::Time,
        RosType::Pose,
        RosType::PoseStamped,
        RosType::Twist,
        RosType::TransformStamped,
        RosType::Imu,
        RosType::Image,
        RosType::PointCloud2,
        RosType::NavSatFix,
        RosType::Raw,
    ];

    /// `(package, type)` of the ROS 2 name `package/msg/Type`.
    pub fn ros_name(self) -> (&'static str, &'static str) {
        match self {
            RosType::String => ("std_msgs", "String"),
            RosType::Header => ("std_msgs", "Header"),
            RosType::Time => ("builtin_interfaces", "Time"),
            RosType::Pose => ("geometry_msgs", "Pose"),
            RosType::PoseStamped => ("geometry_msgs", "PoseStamped"),
            RosType::Twist => ("geometry_msgs", "Twist"),
            RosType::TransformStamped => ("geometry_msgs", "TransformStamped"),
            RosType::Imu => ("sensor_msgs", "Imu"),
            RosType::Image => ("sensor_msgs", "Image"),
            RosType::PointCloud2 => ("sensor_msgs", "PointCloud2"),
            RosType::NavSatFix => ("sensor_msgs", "NavSatFix"),
            RosType::Raw => ("std_msgs", "UInt8MultiArray"),
        }
    }

    /// The name on the DDS wire, `package::msg::dds_::Type_`.
    pub fn dds_name(self) -> String {
        let (p, t) = self.ros_name();
        format!("{p}::msg::dds_::{t}_")
    }

    /// The shipped protobuf message's full name on the shoal side (`None` for [`RosType::Raw`]).
    pub fn proto_name(self) -> Option<String> {
        (self != RosType::Raw).then(|| {
            let (p, t) = self.ros_name();
            format!("{p}.{t}")
        })
    }

    /// Parses `package/msg/Type`, `package/Type`, or `raw` (for [`RosType::Raw`]).
    pub fn parse(s: &str) -> Option<RosType> {
        if s == "raw" {
            return Some(RosType::Raw);
        }
        let mut parts = s.split('/');
        let (pkg, mid, name) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(p), Some(n), None, None) => (p, "msg", n),
            (Some(p), Some(m), Some(n), None) => (p, m, n),
            _ => return None,
        };
        if mid != "msg" {
            return None;
        }
        RosType::ALL.into_iter().find(|t| t.ros_name() == (pkg, name))
    }

    /// The accepted spellings, for error messages.
    pub fn allowed() -> String {
        let mut names: Vec<String> = RosType::ALL.iter().map(ToString::to_string).collect();
        names.push("raw".into());
        names.join(", ")
    }
}

impl fmt::Display for RosType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p, t) = self.ros_name();
        write!(f, "{p}/msg/{t}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for t in RosType::ALL {
            assert_eq!(RosType::parse(&t.to_string()), Some(t));
            let (p, n) = t.ros_name();
            assert_eq!(RosType::parse(&format!("{p}/{n}")), Some(t));
        }
        assert_eq!(RosType::parse("raw"), Some(RosType::Raw));
        assert_eq!(RosType::parse("sensor_msgs/srv/Image"), None);
        assert_eq!(RosType::parse("sensor_msgs/msg/Nope"), None);
        assert_eq!(RosType::Image.dds_name(), "sensor_msgs::msg::dds_::Image_");
        assert_eq!(RosType::Imu.proto_name().as_deref(), Some("sensor_msgs.Imu"));
    }
}
