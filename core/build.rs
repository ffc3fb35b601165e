//! Generates eCAL's registration protobuf (`eCAL.pb`) and shoal's extension (`shoal`) from the
//! `.proto` files in `proto/`, with protox (pure Rust, no `protoc`) and prost-build. The code is
//! included by `src/wire/pb.rs`.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    // The imports bring in the other files (topic, process, layer, datatype, shoal_layer).
    let fds = protox::compile(["ecal/core/pb/ecal.proto"], ["proto"])?;
    // A data sample's payload decodes into a range of the received buffer (no copy; `wire/data_sample.rs`).
    prost_build::Config::new().bytes([".eCAL.pb.Content.payload"]).compile_fds(fds)?;
    Ok(())
}
