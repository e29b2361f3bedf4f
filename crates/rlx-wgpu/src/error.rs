//! The wgpu backend's error: every failure names the device flavour, kernel, op, shapes or
//! sizes involved; shader failures carry the WGSL and wgpu's message.

/// Why compiling or running on a wgpu device failed.
#[derive(Debug, thiserror::Error)]
pub enum WgpuError {
    /// No usable adapter for the flavour.
    #[error("{0}")]
    Unavailable(String),
    /// The kernel program uses something this backend cannot lower (all are listed).
    #[error("the wgpu backend cannot lower {}", .0.join("; "))]
    Unsupported(Vec<String>),
    /// A device limit would be exceeded.
    #[error("{device}: {what} exceeds the adapter limit ({limit}); {hint}")]
    Limit {
        /// the device flavour and adapter name
        device: String,
        /// what asked for too much, with the amount
        what: String,
        /// the limit, with its name
        limit: String,
        /// what to do about it
        hint: String,
    },
    /// wgpu rejected a generated shader or pipeline.
    #[error("wgpu rejected kernel `{kernel}`: {message}\n--- WGSL ---\n{source_text}")]
    Shader {
        /// the kernel label
        kernel: String,
        /// wgpu's validation message
        message: String,
        /// the generated WGSL
        source_text: String,
    },
    /// A device call failed (validation, lost device, mapping).
    #[error("wgpu {call} failed: {message}")]
    Device {
        /// what was being done
        call: String,
        /// wgpu's message
        message: String,
    },
    /// Device memory is exhausted even after releasing cached blocks.
    #[error("out of wgpu device memory: requested {requested} bytes with {in_use} bytes in use ({message})")]
    OutOfMemory {
        /// bytes asked for
        requested: usize,
        /// bytes held by the pool
        in_use: usize,
        /// the allocator's or driver's message
        message: String,
    },
    /// An input or weight is missing or has the wrong dtype or shape.
    #[error("{what} `{name}`: {message}")]
    Binding {
        /// `input` or `param`
        what: &'static str,
        /// its name
        name: String,
        /// what is wrong
        message: String,
    },
    /// A broken internal invariant, reported instead of panicking.
    #[error("wgpu backend internal error: {0}")]
    Invalid(String),
}
