//! Compiles `proto/**/*.proto` with protox (pure Rust, no `protoc` needed) and generates
//! Rust types with prost.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/ra/ledger/v1/events.proto"];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
