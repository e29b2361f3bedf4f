//! ONNX importer.
pub mod proto;
