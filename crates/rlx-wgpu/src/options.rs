//! The wgpu backend's typed options, parsed from the knobs of [`crate::settings`] (the only
//! place their variables are named); everything below takes a [`WgpuOptions`].

use crate::probe::Flavor;
use crate::settings::{parse_bytes, CHECKED, KNOBS, NO_F16, NO_SUBGROUPS, NO_VEC4, STAGING};
use crate::WgpuError;
use rlx_driver::settings::switch_value;
use rlx_driver::Knob;

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
/// `RLX_WGPU_STAGING` bytes (default `64M`, half for each direction; see
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
    /// The options the environment sets; a malformed `RLX_WGPU_STAGING` keeps the default
    /// size ([`WgpuOptions::from_env`] reports it instead).
    fn default() -> Self {
        Self::parse(knob_value).unwrap_or_else(|_| {
            let without_staging = |name: &str| (name != STAGING.name).then(|| knob_value(name));
            Self::parse(|name| without_staging(name).flatten()).unwrap_or_else(|_| Self::builtin())
        })
    }
}

/// The environment's value of the knob named `name`.
fn knob_value(name: &str) -> Option<String> {
    KNOBS.iter().find(|k| k.name == name).and_then(Knob::raw)
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
    /// A malformed `RLX_WGPU_STAGING` (not a byte count), named with its value.
    pub fn from_env() -> Result<Self, WgpuError> {
        Self::parse(knob_value)
    }

    /// The options that `lookup` (a knob's value, None when unset) sets: pure, so tests
    /// pass a map instead of changing the environment.
    ///
    /// # Errors
    /// As [`WgpuOptions::from_env`].
    pub fn parse(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, WgpuError> {
        let switch = |k: Knob| switch_value(lookup(k.name).as_deref(), k.default);
        let staging_bytes = match lookup(STAGING.name) {
            None => DEFAULT_STAGING_BYTES,
            Some(v) => parse_bytes(&v).ok_or_else(|| {
                WgpuError::Invalid(format!(
                    "{}={v:?}: expected a byte count such as 64M (0: no pool)",
                    STAGING.name
                ))
            })?,
        };
        Ok(WgpuOptions {
            checked: switch(CHECKED),
            shader_f16: !switch(NO_F16),
            subgroups: !switch(NO_SUBGROUPS),
            vec4: !switch(NO_VEC4),
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
        WgpuOptions::parse(|name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn options_parse_from_the_knobs() {
        assert_eq!(from(&[]).unwrap(), WgpuOptions::builtin());
        let o = from(&[("RLX_WGPU_STAGING", "8M"), ("RLX_WGPU_NO_VEC4", "1")]).unwrap();
        assert_eq!(o.staging_bytes, 8 << 20);
        assert!(!o.vec4 && o.shader_f16);
        assert_eq!(from(&[("RLX_WGPU_STAGING", "0")]).unwrap().staging_bytes, 0);
        let err = from(&[("RLX_WGPU_STAGING", "lots")]).unwrap_err();
        assert!(err.to_string().contains("RLX_WGPU_STAGING"), "{err}");
        assert_eq!(STAGING.default, "64M");
        assert_eq!(parse_bytes(STAGING.default), Some(DEFAULT_STAGING_BYTES));
    }
}
