//! Generates the typed messages of `proto/imu.proto`, the service of `proto/math.proto` and `fbs/pose.fbs` with shoal-codegen (no protoc, no flatc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    shoal_codegen::Builder::new()
        .proto_files(["proto/imu.proto", "proto/math.proto"])
        .include_dirs(["proto"])
        .fbs_files(["fbs/pose.fbs"])
        .compile()?;
    Ok(())
}
