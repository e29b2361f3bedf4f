//! Compiles the vendored `proto/onnx.proto` and `proto/onnx-data.proto` (sequences, maps,
//! optionals as test data holds them) with `protox` (pure Rust, no `protoc`) and
//! generates the prost types into `OUT_DIR/onnx.rs`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    println!("cargo:rerun-if-changed=proto/onnx-data.proto");
    let fds = protox::compile(["onnx.proto", "onnx-data.proto"], ["proto"])?;
    let mut config = prost_build::Config::new();
    // `bytes::Bytes` lets raw tensor data point into the (memory-mapped) model file.
    config.bytes(["."]);
    config.compile_fds(fds)?;
    Ok(())
}
