//! The CUDA backend's error: every failure names the kernel, op, shapes or sizes involved,
//! and compiler failures carry NVRTC's log and where the source was written.

/// Why compiling or running on CUDA failed.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// No usable driver or device.
    #[error("CUDA is not available: {0}")]
    Unavailable(String),
    /// The kernel program uses something this backend cannot lower (all are listed).
    #[error("the CUDA backend cannot lower {}", .0.join("; "))]
    Unsupported(Vec<String>),
    /// NVRTC rejected generated source.
    #[error(
        "NVRTC failed to compile `{program}` for {arch} (source written to {source_path}):\n{log}"
    )]
    Compile {
        /// program (kernel group) name
        program: String,
        /// target architecture, e.g. `sm_90`
        arch: String,
        /// NVRTC's program log
        log: String,
        /// where the failing source was written for inspection
        source_path: String,
    },
    /// NVRTC itself could not be loaded or called.
    #[error("NVRTC unavailable: {0}")]
    Nvrtc(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver call `{call}` failed: {message}")]
    Driver {
        /// what was being done, e.g. `cuLaunchKernel k3_softmax`
        call: String,
        /// the driver's error name and string
        message: String,
    },
    /// A cuBLASLt call failed or found no algorithm.
    #[error("cuBLASLt {call} failed for {shapes}: {message}")]
    Blas {
        /// which call
        call: String,
        /// the GEMM shapes and dtypes
        shapes: String,
        /// the status
        message: String,
    },
    /// Device memory is exhausted even after releasing cached blocks.
    #[error("out of CUDA memory: requested {requested} bytes with {in_use} bytes in use and {free} bytes free on the device")]
    OutOfMemory {
        /// bytes asked for
        requested: usize,
        /// bytes this backend holds
        in_use: usize,
        /// bytes the driver reports free
        free: usize,
    },
    /// A run input or param does not match what the program was compiled for.
    #[error("{what} `{name}`: {message}")]
    Binding {
        /// "input" or "param"
        what: &'static str,
        /// its name
        name: String,
        /// what is wrong
        message: String,
    },
    /// A kernel program that breaks the kernel IR contract.
    #[error("invalid kernel program: {0}")]
    Invalid(String),
}

impl CudaError {
    /// A driver error with the call described.
    pub fn driver(call: impl Into<String>, e: cudarc::driver::DriverError) -> CudaError {
        let name = e.error_name().map(|s| s.to_string_lossy().into_owned());
        let text = e.error_string().map(|s| s.to_string_lossy().into_owned());
        CudaError::Driver {
            call: call.into(),
            message: format!(
                "{} ({})",
                name.unwrap_or_else(|_| format!("{:?}", e.0)),
                text.unwrap_or_default()
            ),
        }
    }
}
