//! One module per `rlx` verb, plus the model loading they share.

pub mod bench;
pub mod bench_staged;
pub mod devices;
pub mod dump;
pub mod embed;
pub mod generate;
pub mod mem;
pub mod model;
pub mod npy;
pub mod onnx_case;
pub mod onnx_test;
pub mod quantize;
pub mod report;
pub mod run;
pub mod run_model;
pub mod serve;

/// Any error a verb reports: one readable message.
pub type CmdResult = Result<(), Box<dyn std::error::Error>>;
