//! The closed list of devices RLX knows, with their CLI names and Cargo features.

use std::fmt;
use std::str::FromStr;

/// One compilation target. Every target has a variant even when no backend exists yet, so
/// that asking for it gives an honest answer instead of a parse error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// Host CPU.
    Cpu,
    /// Apple Metal (native).
    Metal,
    /// Apple MLX.
    Mlx,
    /// Apple Neural Engine (through Core ML).
    Ane,
    /// The best GPU adapter of any wgpu backend.
    Gpu,
    /// WebGPU default limits and features only.
    WebGpu,
    /// OpenGL / GLES through wgpu's GL backend.
    OpenGl,
    /// Vulkan through wgpu.
    Vulkan,
    /// NVIDIA CUDA.
    Cuda,
    /// AMD ROCm / HIP.
    Rocm,
    /// Intel oneAPI / Level Zero.
    OneApi,
    /// Google TPU.
    Tpu,
    /// Qualcomm Hexagon NPU (QNN).
    Hexagon,
    /// AMD XDNA NPU.
    Xdna,
    /// External GPU enclosure.
    Egpu,
}

impl Device {
    /// Every device, in the deterministic order used by listings and `--device auto`.
    pub const ALL: [Device; 15] = [
        Device::Cpu,
        Device::Metal,
        Device::Mlx,
        Device::Ane,
        Device::Gpu,
        Device::WebGpu,
        Device::OpenGl,
        Device::Vulkan,
        Device::Cuda,
        Device::Rocm,
        Device::OneApi,
        Device::Tpu,
        Device::Hexagon,
        Device::Xdna,
        Device::Egpu,
    ];

    /// The lowercase name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Metal => "metal",
            Device::Mlx => "mlx",
            Device::Ane => "ane",
            Device::Gpu => "gpu",
            Device::WebGpu => "webgpu",
            Device::OpenGl => "opengl",
            Device::Vulkan => "vulkan",
            Device::Cuda => "cuda",
            Device::Rocm => "rocm",
            Device::OneApi => "oneapi",
            Device::Tpu => "tpu",
            Device::Hexagon => "hexagon",
            Device::Xdna => "xdna",
            Device::Egpu => "egpu",
        }
    }

    /// The Cargo feature of the `rlx` crates that compiles this device's backend in.
    pub fn cargo_feature(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Metal => "metal",
            Device::Mlx => "mlx",
            Device::Ane => "coreml",
            Device::Gpu => "gpu",
            Device::WebGpu => "webgpu",
            Device::OpenGl => "opengl",
            Device::Vulkan => "vulkan",
            Device::Cuda => "cuda",
            Device::Rocm => "rocm",
            Device::OneApi => "oneapi",
            Device::Tpu => "tpu",
            Device::Hexagon => "qnn",
            Device::Xdna => "xdna",
            Device::Egpu => "egpu",
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A device name that matches no [`Device`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown device `{given}`; known devices: {known}")]
pub struct ParseDeviceError {
    /// What the user typed.
    pub given: String,
    /// The accepted names, comma separated.
    pub known: String,
}

impl FromStr for Device {
    type Err = ParseDeviceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Device::ALL
            .into_iter()
            .find(|d| d.name() == lower)
            .ok_or_else(|| ParseDeviceError {
                given: s.to_string(),
                known: Device::ALL.map(Device::name).join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for d in Device::ALL {
            assert!(seen.insert(d.name()));
            assert_eq!(d.name().parse::<Device>().unwrap(), d);
            assert_eq!(d.to_string(), d.name());
        }
        assert_eq!("CUDA".parse::<Device>().unwrap(), Device::Cuda);
    }

    #[test]
    fn unknown_name_lists_known_ones() {
        let err = "tpu9".parse::<Device>().unwrap_err();
        assert!(err.to_string().contains("unknown device `tpu9`"));
        assert!(err.to_string().contains("vulkan"));
    }
}
