//! Generates the shipped protobuf forms of the built-in ROS 2 messages and services (`proto/`) with shoal-codegen, and the
//! `demo` package of the generic-mapping tests (`tests/demo/demo.proto`, used by `testdata` and shoal-ros2-peer)
//! and its changed form `demo_v2` (`tests/demo/demo_v2.proto`, the type-change test).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    shoal_codegen::Builder::new()
        .proto_files([
            "proto/builtin_interfaces.proto",
            "proto/std_msgs.proto",
            "proto/geometry_msgs.proto",
            "proto/sensor_msgs.proto",
            "proto/std_srvs.proto",
            "tests/demo/demo.proto",
            "tests/demo/demo_v2.proto",
        ])
        .include_dirs(["proto", "tests/demo"])
        .compile()?;
    Ok(())
}
