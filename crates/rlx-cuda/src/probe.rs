//! Availability and device facts, probed without ever reaching cudarc's safe API unguarded:
//! that API panics when `libcuda` is missing, so the library is looked up first, then the
//! driver is initialized and the devices counted. The answer is computed once per process.

use cudarc::driver::{result, sys};
use rlx_driver::{Availability, DeviceInfo};
use std::sync::OnceLock;

/// What the probe found about device 0.
#[derive(Debug, Clone, PartialEq)]
pub struct CudaDeviceFacts {
    /// the device name, e.g. "NVIDIA H200"
    pub name: String,
    /// compute capability (major, minor)
    pub compute_capability: (i32, i32),
    /// total memory in bytes
    pub memory_bytes: u64,
    /// streaming multiprocessors
    pub sm_count: u32,
    /// shared memory per block with opt-in, in bytes
    pub max_shared_per_block: usize,
    /// L2 cache, in bytes
    pub l2_bytes: usize,
}

impl CudaDeviceFacts {
    /// The NVRTC architecture name, e.g. `sm_86`; `sm_90a` on compute capability 9.0, so
    /// Hopper's architecture-specific instructions (`wgmma`) are available to generated code.
    pub fn arch(&self) -> String {
        let suffix = if self.compute_capability == (9, 0) {
            "a"
        } else {
            ""
        };
        format!(
            "sm_{}{}{suffix}",
            self.compute_capability.0, self.compute_capability.1
        )
    }
}

fn probe_once() -> Result<CudaDeviceFacts, String> {
    // SAFETY: only tries to dlopen the driver library under its usual names.
    if !unsafe { sys::is_culib_present() } {
        return Err("libcuda.so.1 not found (no NVIDIA driver on this machine; \
                    install the driver or add its folder to LD_LIBRARY_PATH)"
            .into());
    }
    result::init().map_err(|e| format!("cuInit failed: {e:?} (driver present but unusable)"))?;
    let count =
        result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e:?}"))?;
    if count < 1 {
        return Err("the NVIDIA driver is present but reports no CUDA device".into());
    }
    let dev = result::device::get(0).map_err(|e| format!("cuDeviceGet(0) failed: {e:?}"))?;
    let attr = |a| {
        // SAFETY: `dev` is a valid device handle from cuDeviceGet.
        unsafe { result::device::get_attribute(dev, a) }.unwrap_or(0)
    };
    use sys::CUdevice_attribute::*;
    let name = result::device::get_name(dev).unwrap_or_else(|_| "unknown CUDA device".into());
    // SAFETY: as above.
    let memory_bytes = unsafe { result::device::total_mem(dev) }.unwrap_or(0) as u64;
    Ok(CudaDeviceFacts {
        name,
        compute_capability: (
            attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        ),
        memory_bytes,
        sm_count: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).max(0) as u32,
        max_shared_per_block: attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).max(0)
            as usize,
        l2_bytes: attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE).max(0) as usize,
    })
}

/// The probe's result for device 0, computed once.
///
/// # Errors
/// Why CUDA cannot be used here, in words a person can act on.
pub fn device_facts() -> Result<&'static CudaDeviceFacts, String> {
    static PROBE: OnceLock<Result<CudaDeviceFacts, String>> = OnceLock::new();
    PROBE.get_or_init(probe_once).as_ref().map_err(Clone::clone)
}

/// Whether CUDA can run now; when it can, NVRTC must be loadable too.
pub fn availability() -> Availability {
    match device_facts() {
        Err(reason) => Availability::no(reason),
        Ok(_) => match crate::nvrtc::nvrtc_present() {
            Ok(()) => Availability::yes(),
            Err(reason) => Availability::no(reason),
        },
    }
}

/// Facts for `rlx devices`, when a device is present.
pub fn info() -> Option<DeviceInfo> {
    let f = device_facts().ok()?;
    Some(DeviceInfo {
        name: f.name.clone(),
        memory_bytes: Some(f.memory_bytes),
        compute_units: Some(f.sm_count),
        arch: Some(format!(
            "{} (compute capability {}.{})",
            f.arch(),
            f.compute_capability.0,
            f.compute_capability.1
        )),
        software: false,
    })
}
