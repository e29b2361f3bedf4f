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

/// A byte count: digits with an optional binary suffix (`K`, `M`, `G`, `T`, an optional
/// trailing `B` or `iB`), e.g. `64M`, `2GiB`, `1048576` (the syntax of `RLX_CUDA_STAGING`).
pub fn parse_bytes(text: &str) -> Option<usize> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'K' | 'k') => (&t[..i], 10),
        (i, 'M' | 'm') => (&t[..i], 20),
        (i, 'G' | 'g') => (&t[..i], 30),
        (i, 'T' | 't') => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: usize = digits.trim().parse().ok()?;
    n.checked_mul(1usize << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("0"), Some(0));
        assert_eq!(parse_bytes("64M"), Some(64 << 20));
        assert_eq!(parse_bytes("2GiB"), Some(2 << 30));
        assert_eq!(parse_bytes(" 512kB "), Some(512 << 10));
        for bad in ["", "M", "-1M", "1.5G", "lots", "99999999999999999999T"] {
            assert_eq!(parse_bytes(bad), None, "{bad:?}");
        }
    }
}
