//! Deterministic messages, number `i` of a run: the interop tests and the benchmark send them on one side and
//! check them on the other (`tests/dds/peer.py` builds the same ones with rosbags).

use crate::pb::{builtin_interfaces, demo, geometry_msgs, sensor_msgs, std_msgs};

fn header(i: u32, frame: &str) -> Option<std_msgs::Header> {
    Some(std_msgs::Header {
        stamp: Some(builtin_interfaces::Time { sec: i as i32, nanosec: i.wrapping_mul(1000) }),
        frame_id: frame.into(),
    })
}

/// The byte pattern of image and point cloud number `i`: byte `k` is `(k + i) % 251`.
pub fn pattern(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|k| ((k + i as usize) % 251) as u8).collect()
}

/// `std_msgs.String` number `i`.
pub fn string(i: u32) -> std_msgs::String {
    std_msgs::String { data: format!("hello {i}") }
}

/// `sensor_msgs.Imu` number `i` (values exact in binary, so they compare equal after any round trip).
pub fn imu(i: u32) -> sensor_msgs::Imu {
    let f = f64::from(i);
    let cov = |g: &dyn Fn(f64) -> f64| (0..9).map(|k| g(f64::from(k))).collect::<Vec<_>>();
    sensor_msgs::Imu {
        header: header(i, "imu"),
        orientation: Some(geometry_msgs::Quaternion { x: f + 0.5, y: 0.25, z: -f, w: 1.0 }),
        orientation_covariance: cov(&|k| k + f),
        angular_velocity: Some(geometry_msgs::Vector3 { x: 0.5 * f, y: 1.5, z: -2.0 }),
        angular_velocity_covariance: cov(&|k| 0.125 * k),
        linear_acceleration: Some(geometry_msgs::Vector3 { x: 9.75, y: f, z: 0.0 }),
        linear_acceleration_covariance: cov(&|k| -k),
    }
}

/// `sensor_msgs.Image` number `i`, rgb8, 1024 pixels wide, about `size` bytes of data.
pub fn image(i: u32, size: usize) -> sensor_msgs::Image {
    let height = (size / 3072).max(1) as u32;
    sensor_msgs::Image {
        header: header(i, "camera"),
        height,
        width: 1024,
        encoding: "rgb8".into(),
        is_bigendian: 0,
        step: 3072,
        data: pattern(i, 3072 * height as usize),
    }
}

/// `sensor_msgs.PointCloud2` number `i`: x, y, z float32 at 16-byte points, about `size` bytes of data.
pub fn pointcloud2(i: u32, size: usize) -> sensor_msgs::PointCloud2 {
    let width = (size / 16).max(1) as u32;
    let field = |name: &str, offset| sensor_msgs::PointField { name: name.into(), offset, datatype: 7, count: 1 };
    sensor_msgs::PointCloud2 {
        header: header(i, "lidar"),
        height: 1,
        width,
        fields: vec![field("x", 0), field("y", 4), field("z", 8)],
        is_bigendian: false,
        point_step: 16,
        row_step: 16 * width,
        data: pattern(i, 16 * width as usize),
        is_dense: true,
    }
}

/// `geometry_msgs.PoseStamped` number `i`.
pub fn pose_stamped(i: u32) -> geometry_msgs::PoseStamped {
    let f = f64::from(i);
    geometry_msgs::PoseStamped {
        header: header(i, "map"),
        pose: Some(geometry_msgs::Pose {
            position: Some(geometry_msgs::Point { x: f, y: -f, z: 0.5 }),
            orientation: Some(geometry_msgs::Quaternion { x: 0.0, y: 0.0, z: 0.5, w: 0.75 }),
        }),
    }
}

/// `geometry_msgs.Twist` number `i`.
pub fn twist(i: u32) -> geometry_msgs::Twist {
    let f = f64::from(i);
    geometry_msgs::Twist {
        linear: Some(geometry_msgs::Vector3 { x: f, y: 0.0, z: 0.0 }),
        angular: Some(geometry_msgs::Vector3 { x: 0.0, y: 0.0, z: -0.25 * f }),
    }
}

/// `geometry_msgs.TransformStamped` number `i`.
pub fn transform_stamped(i: u32) -> geometry_msgs::TransformStamped {
    let f = f64::from(i);
    geometry_msgs::TransformStamped {
        header: header(i, "odom"),
        child_frame_id: "base_link".into(),
        transform: Some(geometry_msgs::Transform {
            translation: Some(geometry_msgs::Vector3 { x: f, y: 2.0, z: 3.0 }),
            rotation: Some(geometry_msgs::Quaternion { x: 0.0, y: 0.0, z: 0.0, w: 1.0 }),
        }),
    }
}

/// `sensor_msgs.NavSatFix` number `i`.
pub fn nav_sat_fix(i: u32) -> sensor_msgs::NavSatFix {
    let f = f64::from(i);
    sensor_msgs::NavSatFix {
        header: header(i, "gps"),
        status: Some(sensor_msgs::NavSatStatus { status: -1, service: 1 }),
        latitude: 48.0 + f / 1024.0,
        longitude: 11.5,
        altitude: 520.25,
        position_covariance: (0..9).map(f64::from).collect(),
        position_covariance_type: 2,
    }
}

/// The message number a `std_msgs.String` of [`string`] carries.
pub fn string_index(s: &std_msgs::String) -> Option<u32> {
    s.data.strip_prefix("hello ")?.parse().ok()
}

/// The message number in a header of these messages (its `stamp.sec`).
pub fn header_index(h: &Option<std_msgs::Header>) -> Option<u32> {
    h.as_ref()?.stamp.as_ref().and_then(|t| u32::try_from(t.sec).ok())
}

/// The shoal type name of the raw tests' payloads: what the shoal publisher announces and what
/// `layout.dim[0].label` of the `std_msgs/msg/UInt8MultiArray` carries.
pub const RAW_TYPE: &str = "shoal_test.Blob";

/// Raw payload number `i`: `i` in 4 little-endian bytes, then [`pattern`], `size` bytes in all (at least 4).
pub fn raw(i: u32, size: usize) -> Vec<u8> {
    let mut v = pattern(i, size.max(4));
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

/// The message number a payload of [`raw`] carries.
pub fn raw_index(payload: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(payload.get(..4)?.try_into().ok()?))
}

/// `demo.Telemetry` number `i` (the generic-mapping tests' message, `tests/demo/`), with `size` bytes of `blob`.
/// Every ROS-side nested message is present (a ROS message always has them), and the arrays vary in length
/// with `i` (some are empty).
pub fn telemetry(i: u32, size: usize) -> demo::Telemetry {
    let f = f64::from(i);
    let wheel = |k: u32| demo::Wheel {
        name: format!("w{k}"),
        speed: f + f64::from(k) * 0.5,
        ticks: i * 10 + k,
        slipping: k % 2 == 1,
    };
    demo::Telemetry {
        header: Some(demo::Header {
            stamp: Some(demo::Time { sec: i as i32, nanosec: i.wrapping_mul(1000) }),
            frame_id: "base_link".into(),
        }),
        pose: Some(demo::Pose {
            position: Some(demo::Point { x: f, y: -f, z: 0.25 }),
            orientation: Some(demo::Quaternion { x: 0.0, y: 0.0, z: 0.5, w: 0.75 }),
        }),
        wheels: (0..4).map(wheel).collect(),
        spare: (0..i % 3).map(|k| wheel(10 + k)).collect(),
        temperatures: vec![20.5, 21.25 + (i % 8) as f32],
        gyro: vec![0.125 * f, -0.5, 1.0],
        errors: (0..i % 9).map(|k| k as i32 * 7 - 20).collect(),
        name: format!("rover {i}"),
        tags: vec!["a".into(), format!("t{i}")],
        blob: pattern(i, size),
        mode: (i % 2) as i32,
        ok: i.is_multiple_of(2),
        trim: -((i % 100) as i32),
        flags: i % 256,
        grade: 65 + i % 26,
        volts: 12000 + i % 1000,
        seq: -i64::from(i) * 1_000_000_007,
        counter: u64::from(i) << 40,
        uptime: Some(demo::Time { sec: i as i32 * 60, nanosec: 5 }),
    }
}

/// Message `i` of [`telemetry`] as a publisher that changed its type sends it: `demo_v2.Telemetry`, every field
/// renumbered, the same values.
pub fn telemetry_v2(i: u32, size: usize) -> crate::pb::demo_v2::Telemetry {
    let t = telemetry(i, size);
    crate::pb::demo_v2::Telemetry {
        header: t.header,
        pose: t.pose,
        wheels: t.wheels,
        spare: t.spare,
        temperatures: t.temperatures,
        gyro: t.gyro,
        errors: t.errors,
        name: t.name,
        tags: t.tags,
        blob: t.blob,
        mode: t.mode,
        ok: t.ok,
        trim: t.trim,
        flags: t.flags,
        grade: t.grade,
        volts: t.volts,
        seq: t.seq,
        counter: t.counter,
        uptime: t.uptime,
    }
}

/// The message number of a [`telemetry`] message (its `header.stamp.sec`).
pub fn telemetry_index(t: &demo::Telemetry) -> Option<u32> {
    t.header.as_ref()?.stamp.as_ref().and_then(|s| u32::try_from(s.sec).ok())
}

/// The services of the tests: `trigger` (std_srvs/srv/Trigger), `set_bool` (SetBool), `empty` (Empty) and `scale`
/// (`demo_msgs/srv/Scale`, generic: `demo.Scale_Request` / `demo.Scale_Response`).
pub const SERVICE_KINDS: [&str; 4] = ["trigger", "set_bool", "empty", "scale"];

/// Request number `i` of a service `kind`: its protobuf request and response types and the request's bytes.
pub fn service_request(kind: &str, i: u32) -> Option<(shoal::TypeInfo, shoal::TypeInfo, Vec<u8>)> {
    use crate::pb::std_srvs;
    use prost::Message as _;
    fn types<A: shoal::Message, B: shoal::Message>() -> (shoal::TypeInfo, shoal::TypeInfo) {
        (A::type_info().clone(), B::type_info().clone())
    }
    let ((a, b), bytes) = match kind {
        "trigger" => (
            types::<std_srvs::TriggerRequest, std_srvs::TriggerResponse>(),
            std_srvs::TriggerRequest {}.encode_to_vec(),
        ),
        "set_bool" => (
            types::<std_srvs::SetBoolRequest, std_srvs::SetBoolResponse>(),
            std_srvs::SetBoolRequest { data: i % 2 == 1 }.encode_to_vec(),
        ),
        "empty" => {
            (types::<std_srvs::EmptyRequest, std_srvs::EmptyResponse>(), std_srvs::EmptyRequest {}.encode_to_vec())
        }
        "scale" => {
            let f = f64::from(i);
            let wheel = demo::Wheel { name: format!("w{i}"), speed: f * 0.5, ticks: i, slipping: i % 2 == 1 };
            let req = demo::ScaleRequest { wheel: Some(wheel), factors: vec![1.0, 2.5, f], times: (i % 3 + 1) as i32 };
            (types::<demo::ScaleRequest, demo::ScaleResponse>(), req.encode_to_vec())
        }
        _ => return None,
    };
    Some((a, b, bytes))
}

/// What the tests' servers (shoal and Cyclone alike) answer to a request of `kind`: Trigger "triggered"; SetBool
/// success = data, "data is true|false"; Empty nothing; Scale the wheel once per factor with the speed times the
/// factor and the ticks times `times`, and a note `NAME xN` (N: factors × times).
pub fn service_response(kind: &str, request: &[u8]) -> Result<Vec<u8>, String> {
    use crate::pb::std_srvs;
    use prost::Message as _;
    let e = |e: prost::DecodeError| e.to_string();
    Ok(match kind {
        "trigger" => std_srvs::TriggerResponse { success: true, message: "triggered".into() }.encode_to_vec(),
        "set_bool" => {
            let data = std_srvs::SetBoolRequest::decode(request).map_err(e)?.data;
            std_srvs::SetBoolResponse { success: data, message: format!("data is {data}") }.encode_to_vec()
        }
        "empty" => std_srvs::EmptyResponse {}.encode_to_vec(),
        "scale" => {
            let r = demo::ScaleRequest::decode(request).map_err(e)?;
            let w = r.wheel.unwrap_or_default();
            let times = u32::try_from(r.times).unwrap_or(0);
            let wheels: Vec<demo::Wheel> = r
                .factors
                .iter()
                .map(|f| demo::Wheel {
                    name: w.name.clone(),
                    speed: w.speed * f,
                    ticks: w.ticks.wrapping_mul(times),
                    slipping: w.slipping,
                })
                .collect();
            let note = format!("{} x{}", w.name, r.factors.len() * times as usize);
            demo::ScaleResponse { wheels, note }.encode_to_vec()
        }
        _ => return Err(format!("unknown service kind {kind}")),
    })
}
