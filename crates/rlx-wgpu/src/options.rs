//! The wgpu backend's settings, declared and read from the environment in this one place;
//! everything below takes a [`WgpuOptions`].

use crate::probe::Flavor;
use crate::WgpuError;

/// Default size of the staging pool, [`WgpuOptions::staging_bytes`].
pub const DEFAULT_STAGING_BYTES: usize = 64 << 20;

/// Options that change what the wgpu backend compiles and how it moves data.
///
/// Shader bounds checks: wgpu normally guards every storage access at run time. Every
/// access the generators emit is already guarded or clamped to its binding (the
/// differential tests check that indexing against the interpreter), so on native adapters
/// (`gpu`, `vulkan`, `opengl`, `metal`) shaders are built unchecked by default;
/// `RLX_WGPU_CHECKED=1` turns the checks back on for debugging. The `webgpu` flavour is
/// always checked, as browsers are.
///
/// Adapter features: f16 as a WGSL type (SHADER_F16), subgroup operations (SUBGROUP) and the
/// `vec4` paths are used where the adapter has them; `RLX_WGPU_NO_F16=1`,
/// `RLX_WGPU_NO_SUBGROUPS=1` and `RLX_WGPU_NO_VEC4=1` turn each off (to compare, or to
/// rule one out while debugging).
///
/// Staging: uploads and downloads go through a pool of host-visible buffers of
/// `RLX_WGPU_STAGING_MB` mebibytes (default 64, half for each direction; see
/// [`crate::staging`]); `0` selects the direct path (`queue.write_buffer`, a fresh mapped
/// buffer per download).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WgpuOptions {
    /// keep wgpu's shader bounds checks on native adapters (`webgpu` is always checked)
    pub checked: bool,
    /// store f16 as a WGSL type where the adapter has SHADER_F16
    pub shader_f16: bool,
    /// combine reductions with subgroup operations where the adapter has them
    pub subgroups: bool,
    /// read and write `vec4`s in contiguous elementwise kernels and GEMM tiles
    pub vec4: bool,
    /// bytes of the staging pool (both directions); 0 copies without a pool
    pub staging_bytes: usize,
}

impl Default for WgpuOptions {
    /// The options the environment sets; a malformed `RLX_WGPU_STAGING_MB` keeps the default
    /// size ([`WgpuOptions::from_env`] reports it instead).
    fn default() -> Self {
        let var = |name: &str| std::env::var(name).ok();
        Self::read(var).unwrap_or_else(|_| {
            let without_staging = |name: &str| (name != "RLX_WGPU_STAGING_MB").then(|| var(name));
            Self::read(|name| without_staging(name).flatten()).unwrap_or_else(|_| Self::builtin())
        })
    }
}

impl WgpuOptions {
    /// The options with every setting at its built-in default (nothing read from the
    /// environment).
    pub fn builtin() -> Self {
        WgpuOptions {
            checked: false,
            shader_f16: true,
            subgroups: true,
            vec4: true,
            staging_bytes: DEFAULT_STAGING_BYTES,
        }
    }

    /// The options the environment sets.
    ///
    /// # Errors
    /// A malformed `RLX_WGPU_STAGING_MB` (not a whole number of mebibytes), named with its
    /// value.
    pub fn from_env() -> Result<Self, WgpuError> {
        Self::read(|name| std::env::var(name).ok())
    }

    /// The options that `var` (an environment lookup) sets.
    fn read(var: impl Fn(&str) -> Option<String>) -> Result<Self, WgpuError> {
        let set = |name: &str| var(name).is_some_and(|v| v == "1");
        let staging_bytes = match var("RLX_WGPU_STAGING_MB") {
            None => DEFAULT_STAGING_BYTES,
            Some(v) => v
                .trim()
                .parse::<usize>()
                .ok()
                .and_then(|mb| mb.checked_mul(1 << 20))
                .ok_or_else(|| {
                    WgpuError::Invalid(format!(
                        "RLX_WGPU_STAGING_MB={v:?} is not a whole number of mebibytes"
                    ))
                })?,
        };
        Ok(WgpuOptions {
            checked: set("RLX_WGPU_CHECKED"),
            shader_f16: !set("RLX_WGPU_NO_F16"),
            subgroups: !set("RLX_WGPU_NO_SUBGROUPS"),
            vec4: !set("RLX_WGPU_NO_VEC4"),
            staging_bytes,
        })
    }

    /// Whether shaders for `flavor` keep wgpu's bounds checks.
    pub fn checked_on(&self, flavor: Flavor) -> bool {
        self.checked || flavor == Flavor::WebGpu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<WgpuOptions, WgpuError> {
        WgpuOptions::read(|name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn settings_parse_in_one_place() {
        assert_eq!(from(&[]).unwrap(), WgpuOptions::builtin());
        let o = from(&[("RLX_WGPU_STAGING_MB", "8"), ("RLX_WGPU_NO_VEC4", "1")]).unwrap();
        assert_eq!(o.staging_bytes, 8 << 20);
        assert!(!o.vec4 && o.shader_f16);
        assert_eq!(
            from(&[("RLX_WGPU_STAGING_MB", "0")]).unwrap().staging_bytes,
            0
        );
        let err = from(&[("RLX_WGPU_STAGING_MB", "lots")]).unwrap_err();
        assert!(err.to_string().contains("RLX_WGPU_STAGING_MB"), "{err}");
    }
}
