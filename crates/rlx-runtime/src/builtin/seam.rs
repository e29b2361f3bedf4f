//! Honest seams for devices without a real backend yet: each probes what it cheaply can
//! (a driver library or device node), reports itself unavailable with the reason, claims no
//! ops, and refuses to compile with an error naming what is missing.

#![allow(dead_code)]

use crate::{Backend, CompileOptions, Executable, RuntimeError};
use rlx_driver::{Availability, Device, DeviceError};
use rlx_ir::{Graph, Op, TensorType};
use std::path::Path;

/// A backend that exists only as a registration point.
pub struct SeamBackend {
    device: Device,
    /// What the hardware probe found, in words.
    probe: String,
}

impl Backend for SeamBackend {
    fn device(&self) -> Device {
        self.device
    }

    fn availability(&self) -> Availability {
        Availability::no(format!(
            "RLX has no {} backend yet (registered seam, 0 ops); {}",
            self.device, self.probe
        ))
    }

    fn supports(&self, _op: &Op, _inputs: &[&TensorType]) -> bool {
        false
    }

    fn compile(
        &self,
        _graph: &Graph,
        _options: &CompileOptions,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        let Availability { reason, .. } = self.availability();
        Err(RuntimeError::Device(DeviceError::Unavailable {
            device: self.device,
            reason: reason.unwrap_or_default(),
        }))
    }
}

fn seam(device: Device, probe: String) -> Box<dyn Backend> {
    Box::new(SeamBackend { device, probe })
}

/// Looks for a shared library in the usual loader directories.
fn find_library(names: &[&str]) -> Option<String> {
    let mut dirs: Vec<String> = std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    dirs.extend(
        [
            "/usr/lib",
            "/usr/lib64",
            "/usr/local/lib",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/local/cuda/lib64",
            "/opt/rocm/lib",
        ]
        .map(str::to_string),
    );
    for d in &dirs {
        for n in names {
            let p = Path::new(d).join(n);
            if p.exists() {
                return Some(p.display().to_string());
            }
        }
    }
    None
}

fn probe_library(what: &str, names: &[&str]) -> String {
    match find_library(names) {
        Some(p) => format!("{what} found at {p}, but RLX cannot use it until the backend lands"),
        None => format!("and no {what} was found ({} missing)", names[0]),
    }
}

fn apple_only(what: &str) -> String {
    if cfg!(target_os = "macos") {
        format!("{what} is present on this macOS host but not wired into RLX yet")
    } else {
        format!(
            "{what} needs macOS on Apple hardware; this host is {}",
            std::env::consts::OS
        )
    }
}

pub(crate) fn metal() -> Box<dyn Backend> {
    seam(Device::Metal, apple_only("Metal"))
}

pub(crate) fn mlx() -> Box<dyn Backend> {
    seam(Device::Mlx, apple_only("MLX"))
}

pub(crate) fn ane() -> Box<dyn Backend> {
    seam(Device::Ane, apple_only("the Apple Neural Engine (Core ML)"))
}

pub(crate) fn gpu() -> Box<dyn Backend> {
    seam(
        Device::Gpu,
        probe_library("Vulkan loader", &["libvulkan.so.1", "libvulkan.so"]),
    )
}

pub(crate) fn webgpu() -> Box<dyn Backend> {
    seam(
        Device::WebGpu,
        probe_library("Vulkan loader", &["libvulkan.so.1", "libvulkan.so"]),
    )
}

pub(crate) fn opengl() -> Box<dyn Backend> {
    seam(
        Device::OpenGl,
        probe_library("EGL library", &["libEGL.so.1", "libEGL.so"]),
    )
}

pub(crate) fn vulkan() -> Box<dyn Backend> {
    seam(
        Device::Vulkan,
        probe_library("Vulkan loader", &["libvulkan.so.1", "libvulkan.so"]),
    )
}

pub(crate) fn cuda() -> Box<dyn Backend> {
    seam(
        Device::Cuda,
        probe_library("NVIDIA driver", &["libcuda.so.1", "libcuda.so"]),
    )
}

pub(crate) fn rocm() -> Box<dyn Backend> {
    seam(
        Device::Rocm,
        probe_library("ROCm runtime", &["libamdhip64.so", "libamdhip64.so.6"]),
    )
}

pub(crate) fn oneapi() -> Box<dyn Backend> {
    seam(
        Device::OneApi,
        probe_library(
            "Level Zero loader",
            &["libze_loader.so.1", "libze_loader.so"],
        ),
    )
}

pub(crate) fn tpu() -> Box<dyn Backend> {
    seam(Device::Tpu, probe_library("TPU runtime", &["libtpu.so"]))
}

pub(crate) fn hexagon() -> Box<dyn Backend> {
    seam(
        Device::Hexagon,
        probe_library("Qualcomm QNN runtime", &["libQnnHtp.so"]),
    )
}

pub(crate) fn xdna() -> Box<dyn Backend> {
    let probe = if Path::new("/dev/accel/accel0").exists() {
        "an accel device node exists, but RLX cannot use it until the backend lands".to_string()
    } else {
        "and no XDNA device node (/dev/accel/accel0) was found".to_string()
    };
    seam(Device::Xdna, probe)
}

pub(crate) fn egpu() -> Box<dyn Backend> {
    seam(
        Device::Egpu,
        "and no external GPU enclosure was detected".to_string(),
    )
}
