//! Generates the shipped protobuf forms of the built-in ROS 2 messages (`proto/`) with shoal-codegen.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    shoal_codegen::Builder::new()
        .proto_files([
            "proto/builtin_interfaces.proto",
            "proto/std_msgs.proto",
            "proto/geometry_msgs.proto",
            "proto/sensor_msgs.proto",
        ])
        .include_dirs(["proto"])
        .compile()?;
    Ok(())
}
