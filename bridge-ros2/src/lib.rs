//! shoal-ros2-bridge: forwards shoal (and so eCAL) topics to and from ROS 2, through DDS (RustDDS via
//! ros2-client), with no ROS install.
//!
//! - [`config`]: the TOML file and `--topic` flags, every key checked.
//! - [`types`]: the ROS 2 types the bridge carries; [`ros`] their CDR (serde) form; [`pb`] the shipped protobuf
//!   form (`proto/`); [`mapping`] field by field between the two.
//! - [`msgdef`]: ROS 2 `.msg` files (any type, no ROS install); [`generic`] maps any protobuf message to one by
//!   field names, checked at start, with CDR driven by the parsed definition.
//! - [`services`]: services both ways (rmw's `rq/` and `rr/` topics, the request id in the sample).
//! - [`auto`]: automatic routes (`[auto]`): topics that appear on either side, matched by name.
//! - [`bridge`]: the running bridge (threads, echo suppression, QoS checks); [`stats`] its counters.
//! - [`supervisor`]: the bridge as a supervisor process and a worker under a memory limit, restarted when it
//!   dies.
//! - [`testdata`]: deterministic messages the interop tests and the benchmark send and check.

pub mod auto;
pub mod bridge;
pub mod config;
pub mod generic;
pub mod mapping;
pub mod msgdef;
pub mod ros;
pub mod services;
pub mod stats;
pub mod supervisor;
pub mod testdata;
pub mod types;

/// The shipped protobuf messages (generated from `proto/` by shoal-codegen): modules `builtin_interfaces`,
/// `std_msgs`, `geometry_msgs`, `sensor_msgs`, `std_srvs`; and `demo`, the protobuf side of the generic-mapping tests
/// (`tests/demo/demo.proto`).
pub mod pb {
    shoal::include_proto!();
}

/// `cdr-encoding` + the 4-byte encapsulation header `00 01 00 00` (CDR little-endian): the bytes a ROS 2 DDS
/// writer puts in a sample.
pub fn to_cdr<T: serde::Serialize>(msg: &T) -> Result<Vec<u8>, String> {
    let body = cdr_encoding::to_vec::<T, byteorder::LittleEndian>(msg).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&[0, 1, 0, 0]);
    out.extend_from_slice(&body);
    Ok(out)
}
