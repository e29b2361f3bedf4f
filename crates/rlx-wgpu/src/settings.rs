//! The wgpu backend's knobs: each `RLX_WGPU_*` variable declared once here and parsed into
//! [`crate::WgpuOptions`]; [`KNOBS`] is what `rlx devices --settings` lists for the wgpu
//! devices.

use rlx_driver::Knob;

/// Bounds checks kept in shaders.
pub const CHECKED: Knob = Knob {
    name: "RLX_WGPU_CHECKED",
    default: "0",
    help: "keep wgpu's bounds checks in every shader (always on for WebGPU)",
};
/// f16 storage off.
pub const NO_F16: Knob = Knob {
    name: "RLX_WGPU_NO_F16",
    default: "0",
    help: "store f16 as f32 even where the adapter has SHADER_F16",
};
/// Subgroup reductions off.
pub const NO_SUBGROUPS: Knob = Knob {
    name: "RLX_WGPU_NO_SUBGROUPS",
    default: "0",
    help: "reduce without subgroup operations even where the adapter has them",
};
/// vec4 loads off.
pub const NO_VEC4: Knob = Knob {
    name: "RLX_WGPU_NO_VEC4",
    default: "0",
    help: "scalar loads and stores instead of vec4 in elementwise kernels and GEMM tiles",
};

/// Size of the staging pool.
pub const STAGING: Knob = Knob {
    name: "RLX_WGPU_STAGING",
    default: "64M",
    help: "bytes of host-visible buffers staging every upload and download (K/M/G; 0: none, queue.write_buffer and a buffer per read)",
};

/// Every wgpu knob, in the order `rlx devices --settings` lists them.
pub const KNOBS: &[Knob] = &[CHECKED, NO_F16, NO_SUBGROUPS, NO_VEC4, STAGING];

pub use rlx_driver::settings::parse_bytes;
