//! Field-by-field mapping between the shipped protobuf messages (`proto/`, module [`pb`]) and the ROS 2 serde
//! structs of [`ros`], both ways. protobuf → ROS can fail (a value out of a ROS field's range, a covariance that is
//! not 9 elements): that is bad input, reported as [`MapError`] naming the field. ROS → protobuf cannot fail.

use crate::pb;
use crate::ros;

/// A protobuf message that does not fit its ROS 2 type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// A number does not fit the ROS field's narrower type (e.g. `uint8`).
    #[error("field {field}: {value} does not fit the ROS type {ros_type}")]
    OutOfRange {
        /// The field's path, e.g. `status.service`.
        field: &'static str,
        /// The value.
        value: i64,
        /// The ROS type of the field.
        ros_type: &'static str,
    },
    /// A ROS fixed-size array got a different number of elements.
    #[error("field {field}: {len} elements, the ROS type has exactly {expected} (or give none)")]
    ArrayLength {
        /// The field.
        field: &'static str,
        /// Elements given.
        len: usize,
        /// Elements the ROS type has.
        expected: usize,
    },
}

fn narrow<T: TryFrom<i64>>(field: &'static str, value: i64, ros_type: &'static str) -> Result<T, MapError> {
    T::try_from(value).map_err(|_| MapError::OutOfRange { field, value, ros_type })
}

fn fixed9(field: &'static str, v: &[f64]) -> Result<[f64; 9], MapError> {
    if v.is_empty() {
        return Ok([0.0; 9]);
    }
    <[f64; 9]>::try_from(v).map_err(|_| MapError::ArrayLength { field, len: v.len(), expected: 9 })
}

/// A protobuf message with a ROS 2 counterpart.
pub trait ToRos: Sized {
    /// The ROS struct.
    type Ros;
    /// protobuf → ROS (fails on values the ROS type cannot hold).
    fn to_ros(&self) -> Result<Self::Ros, MapError>;
    /// ROS → protobuf.
    fn from_ros(ros: Self::Ros) -> Self;
}

impl ToRos for pb::builtin_interfaces::Time {
    type Ros = ros::Time;
    fn to_ros(&self) -> Result<ros::Time, MapError> {
        Ok(ros::Time { sec: self.sec, nanosec: self.nanosec })
    }
    fn from_ros(r: ros::Time) -> Self {
        Self { sec: r.sec, nanosec: r.nanosec }
    }
}

/// An optional nested message: absent maps to the ROS default, ROS always gives one.
fn sub<P: ToRos>(p: &Option<P>) -> Result<P::Ros, MapError>
where
    P::Ros: Default,
{
    p.as_ref().map(P::to_ros).transpose().map(Option::unwrap_or_default)
}

impl ToRos for pb::std_msgs::Header {
    type Ros = ros::Header;
    fn to_ros(&self) -> Result<ros::Header, MapError> {
        Ok(ros::Header { stamp: sub(&self.stamp)?, frame_id: self.frame_id.clone() })
    }
    fn from_ros(r: ros::Header) -> Self {
        Self { stamp: Some(ToRos::from_ros(r.stamp)), frame_id: r.frame_id }
    }
}

impl ToRos for pb::std_msgs::String {
    type Ros = ros::StringMsg;
    fn to_ros(&self) -> Result<ros::StringMsg, MapError> {
        Ok(ros::StringMsg { data: self.data.clone() })
    }
    fn from_ros(r: ros::StringMsg) -> Self {
        Self { data: r.data }
    }
}

macro_rules! xyz {
    ($pb:ty, $ros:ident) => {
        impl ToRos for $pb {
            type Ros = ros::$ros;
            fn to_ros(&self) -> Result<ros::$ros, MapError> {
                Ok(ros::$ros { x: self.x, y: self.y, z: self.z })
            }
            fn from_ros(r: ros::$ros) -> Self {
                Self { x: r.x, y: r.y, z: r.z }
            }
        }
    };
}
xyz!(pb::geometry_msgs::Point, Point);
xyz!(pb::geometry_msgs::Vector3, Vector3);

impl ToRos for pb::geometry_msgs::Quaternion {
    type Ros = ros::Quaternion;
    fn to_ros(&self) -> Result<ros::Quaternion, MapError> {
        Ok(ros::Quaternion { x: self.x, y: self.y, z: self.z, w: self.w })
    }
    fn from_ros(r: ros::Quaternion) -> Self {
        Self { x: r.x, y: r.y, z: r.z, w: r.w }
    }
}

impl ToRos for pb::geometry_msgs::Pose {
    type Ros = ros::Pose;
    fn to_ros(&self) -> Result<ros::Pose, MapError> {
        Ok(ros::Pose { position: sub(&self.position)?, orientation: sub(&self.orientation)? })
    }
    fn from_ros(r: ros::Pose) -> Self {
        Self { position: Some(ToRos::from_ros(r.position)), orientation: Some(ToRos::from_ros(r.orientation)) }
    }
}

impl ToRos for pb::geometry_msgs::PoseStamped {
    type Ros = ros::PoseStamped;
    fn to_ros(&self) -> Result<ros::PoseStamped, MapError> {
        Ok(ros::PoseStamped { header: sub(&self.header)?, pose: sub(&self.pose)? })
    }
    fn from_ros(r: ros::PoseStamped) -> Self {
        Self { header: Some(ToRos::from_ros(r.header)), pose: Some(ToRos::from_ros(r.pose)) }
    }
}

impl ToRos for pb::geometry_msgs::Twist {
    type Ros = ros::Twist;
    fn to_ros(&self) -> Result<ros::Twist, MapError> {
        Ok(ros::Twist { linear: sub(&self.linear)?, angular: sub(&self.angular)? })
    }
    fn from_ros(r: ros::Twist) -> Self {
        Self { linear: Some(ToRos::from_ros(r.linear)), angular: Some(ToRos::from_ros(r.angular)) }
    }
}

impl ToRos for pb::geometry_msgs::Transform {
    type Ros = ros::Transform;
    fn to_ros(&self) -> Result<ros::Transform, MapError> {
        Ok(ros::Transform { translation: sub(&self.translation)?, rotation: sub(&self.rotation)? })
    }
    fn from_ros(r: ros::Transform) -> Self {
        Self { translation: Some(ToRos::from_ros(r.translation)), rotation: Some(ToRos::from_ros(r.rotation)) }
    }
}

impl ToRos for pb::geometry_msgs::TransformStamped {
    type Ros = ros::TransformStamped;
    fn to_ros(&self) -> Result<ros::TransformStamped, MapError> {
        Ok(ros::TransformStamped {
            header: sub(&self.header)?,
            child_frame_id: self.child_frame_id.clone(),
            transform: sub(&self.transform)?,
        })
    }
    fn from_ros(r: ros::TransformStamped) -> Self {
        Self {
            header: Some(ToRos::from_ros(r.header)),
            child_frame_id: r.child_frame_id,
            transform: Some(ToRos::from_ros(r.transform)),
        }
    }
}

impl ToRos for pb::sensor_msgs::Imu {
    type Ros = ros::Imu;
    fn to_ros(&self) -> Result<ros::Imu, MapError> {
        Ok(ros::Imu {
            header: sub(&self.header)?,
            orientation: sub(&self.orientation)?,
            orientation_covariance: fixed9("orientation_covariance", &self.orientation_covariance)?,
            angular_velocity: sub(&self.angular_velocity)?,
            angular_velocity_covariance: fixed9("angular_velocity_covariance", &self.angular_velocity_covariance)?,
            linear_acceleration: sub(&self.linear_acceleration)?,
            linear_acceleration_covariance: fixed9(
                "linear_acceleration_covariance",
                &self.linear_acceleration_covariance,
            )?,
        })
    }
    fn from_ros(r: ros::Imu) -> Self {
        Self {
            header: Some(ToRos::from_ros(r.header)),
            orientation: Some(ToRos::from_ros(r.orientation)),
            orientation_covariance: r.orientation_covariance.to_vec(),
            angular_velocity: Some(ToRos::from_ros(r.angular_velocity)),
            angular_velocity_covariance: r.angular_velocity_covariance.to_vec(),
            linear_acceleration: Some(ToRos::from_ros(r.linear_acceleration)),
            linear_acceleration_covariance: r.linear_acceleration_covariance.to_vec(),
        }
    }
}

impl ToRos for pb::sensor_msgs::Image {
    type Ros = ros::Image;
    fn to_ros(&self) -> Result<ros::Image, MapError> {
        Ok(ros::Image {
            header: sub(&self.header)?,
            height: self.height,
            width: self.width,
            encoding: self.encoding.clone(),
            is_bigendian: narrow("is_bigendian", i64::from(self.is_bigendian), "uint8")?,
            step: self.step,
            data: self.data.clone(),
        })
    }
    fn from_ros(r: ros::Image) -> Self {
        Self {
            header: Some(ToRos::from_ros(r.header)),
            height: r.height,
            width: r.width,
            encoding: r.encoding,
            is_bigendian: u32::from(r.is_bigendian),
            step: r.step,
            data: r.data,
        }
    }
}

impl ToRos for pb::sensor_msgs::PointField {
    type Ros = ros::PointField;
    fn to_ros(&self) -> Result<ros::PointField, MapError> {
        Ok(ros::PointField {
            name: self.name.clone(),
            offset: self.offset,
            datatype: narrow("fields.datatype", i64::from(self.datatype), "uint8")?,
            count: self.count,
        })
    }
    fn from_ros(r: ros::PointField) -> Self {
        Self { name: r.name, offset: r.offset, datatype: u32::from(r.datatype), count: r.count }
    }
}

impl ToRos for pb::sensor_msgs::PointCloud2 {
    type Ros = ros::PointCloud2;
    fn to_ros(&self) -> Result<ros::PointCloud2, MapError> {
        Ok(ros::PointCloud2 {
            header: sub(&self.header)?,
            height: self.height,
            width: self.width,
            fields: self.fields.iter().map(ToRos::to_ros).collect::<Result<_, _>>()?,
            is_bigendian: self.is_bigendian,
            point_step: self.point_step,
            row_step: self.row_step,
            data: self.data.clone(),
            is_dense: self.is_dense,
        })
    }
    fn from_ros(r: ros::PointCloud2) -> Self {
        Self {
            header: Some(ToRos::from_ros(r.header)),
            height: r.height,
            width: r.width,
            fields: r.fields.into_iter().map(ToRos::from_ros).collect(),
            is_bigendian: r.is_bigendian,
            point_step: r.point_step,
            row_step: r.row_step,
            data: r.data,
            is_dense: r.is_dense,
        }
    }
}

impl ToRos for pb::sensor_msgs::NavSatStatus {
    type Ros = ros::NavSatStatus;
    fn to_ros(&self) -> Result<ros::NavSatStatus, MapError> {
        Ok(ros::NavSatStatus {
            status: narrow("status.status", i64::from(self.status), "int8")?,
            service: narrow("status.service", i64::from(self.service), "uint16")?,
        })
    }
    fn from_ros(r: ros::NavSatStatus) -> Self {
        Self { status: i32::from(r.status), service: u32::from(r.service) }
    }
}

impl ToRos for pb::sensor_msgs::NavSatFix {
    type Ros = ros::NavSatFix;
    fn to_ros(&self) -> Result<ros::NavSatFix, MapError> {
        Ok(ros::NavSatFix {
            header: sub(&self.header)?,
            status: sub(&self.status)?,
            latitude: self.latitude,
            longitude: self.longitude,
            altitude: self.altitude,
            position_covariance: fixed9("position_covariance", &self.position_covariance)?,
            position_covariance_type: narrow(
                "position_covariance_type",
                i64::from(self.position_covariance_type),
                "uint8",
            )?,
        })
    }
    fn from_ros(r: ros::NavSatFix) -> Self {
        Self {
            header: Some(ToRos::from_ros(r.header)),
            status: Some(ToRos::from_ros(r.status)),
            latitude: r.latitude,
            longitude: r.longitude,
            altitude: r.altitude,
            position_covariance: r.position_covariance.to_vec(),
            position_covariance_type: u32::from(r.position_covariance_type),
        }
    }
}
