//! Compiles `proto/**/*.proto` with protox (pure Rust, no `protoc` needed), generates Rust
//! types with prost, and their proto3 canonical JSON mapping (serde impls) with pbjson.

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/ra/ledger/v1/events.proto"];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    let encoded = descriptors.encode_to_vec();
    prost_build::Config::new().compile_fds(descriptors)?;
    pbjson_build::Builder::new()
        .register_descriptors(&encoded)?
        .build(&[".ra.ledger.v1"])?;
    Ok(())
}
