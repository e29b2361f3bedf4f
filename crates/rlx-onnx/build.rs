//! Compiles the vendored `proto/onnx.proto` with `protox` (pure Rust, no `protoc`) and
//! generates the prost types into `OUT_DIR/onnx.rs`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let fds = protox::compile(["onnx.proto"], ["proto"])?;
    let mut config = prost_build::Config::new();
    // `bytes::Bytes` lets raw tensor data point into the (memory-mapped) model file.
    config.bytes(["."]);
    config.compile_fds(fds)?;
    Ok(())
}
