//! The single place where backends are registered and found. Builtins register themselves
//! behind their Cargo features the first time the registry is used; anything registered
//! later for the same device replaces the earlier factory.

use crate::Backend;
use rlx_driver::Device;
use rlx_driver::DeviceError;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

/// Bumped by every [`register_backend`]: a session compares it with the value its backend
/// was made at and looks the device up again when it changed.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// How many registrations have happened so far (see [`register_backend`]).
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// Makes a fresh backend instance.
pub type BackendFactory = fn() -> Box<dyn Backend>;

fn registry() -> &'static RwLock<BTreeMap<Device, BackendFactory>> {
    static REGISTRY: OnceLock<RwLock<BTreeMap<Device, BackendFactory>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut map = BTreeMap::new();
        crate::builtin::register_builtins(&mut |d, f| {
            map.insert(d, f);
        });
        RwLock::new(map)
    })
}

/// Registers (or replaces) the backend factory for a device.
pub fn register_backend(device: Device, factory: BackendFactory) {
    let mut map = registry().write().unwrap_or_else(|e| e.into_inner());
    map.insert(device, factory);
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Whether `device` can run graphs here: `Ok` when a backend is registered and available,
/// otherwise the error a [`crate::Session`] would give (the Cargo feature to turn on, or the
/// backend's reason, in words a person can act on).
///
/// # Errors
/// [`DeviceError::NotRegistered`] or [`DeviceError::Unavailable`].
pub fn is_available(device: Device) -> Result<(), DeviceError> {
    available_backend(device).map(|_| ())
}

/// A new instance of `device`'s backend, checked to be available.
pub(crate) fn available_backend(device: Device) -> Result<Box<dyn Backend>, DeviceError> {
    let backend = backend_for(device).ok_or(DeviceError::NotRegistered {
        device,
        feature: device.cargo_feature(),
    })?;
    let avail = backend.availability();
    if !avail.available {
        return Err(DeviceError::Unavailable {
            device,
            reason: avail.reason.unwrap_or_else(|| "unknown reason".into()),
        });
    }
    Ok(backend)
}

/// A new instance of the backend registered for `device`, if any.
pub fn backend_for(device: Device) -> Option<Box<dyn Backend>> {
    let map = registry().read().unwrap_or_else(|e| e.into_inner());
    map.get(&device).map(|f| f())
}

/// Devices with a registered backend, in [`Device::ALL`] order.
pub fn registered_devices() -> Vec<Device> {
    let map = registry().read().unwrap_or_else(|e| e.into_inner());
    map.keys().copied().collect()
}

/// The device `--device auto` picks: the first available in order of expected speed,
/// skipping software GPUs (Mesa lavapipe/llvmpipe), which are slower than the CPU backend.
pub fn auto_device() -> Device {
    const PREFERENCE: [Device; 8] = [
        Device::Cuda,
        Device::Rocm,
        Device::Metal,
        Device::Gpu,
        Device::Vulkan,
        Device::OneApi,
        Device::Egpu,
        Device::Cpu,
    ];
    PREFERENCE
        .into_iter()
        .find(|&d| {
            backend_for(d).is_some_and(|b| {
                // A software GPU (lavapipe, llvmpipe) is slower than the CPU backend.
                b.availability().available && !b.info().is_some_and(|i| i.software)
            })
        })
        .unwrap_or(Device::Cpu)
}

/// What `rlx devices` reports for one device.
#[derive(Debug, Clone)]
pub struct DeviceStatus {
    /// the device
    pub device: Device,
    /// a backend is compiled in
    pub registered: bool,
    /// it can compile and run now
    pub available: bool,
    /// why not, when it cannot
    pub reason: Option<String>,
    /// facts about it, when available
    pub info: Option<rlx_driver::DeviceInfo>,
    /// the knobs its backend reads, with their values now (empty when not compiled in)
    pub settings: Vec<rlx_driver::Setting>,
}

/// Every device in [`Device::ALL`] order: compiled in, available now, and why not.
pub fn device_statuses() -> Vec<DeviceStatus> {
    Device::ALL
        .into_iter()
        .map(|device| match backend_for(device) {
            Some(b) => {
                let a = b.availability();
                let info = if a.available { b.info() } else { None };
                DeviceStatus {
                    device,
                    registered: true,
                    available: a.available,
                    reason: a.reason,
                    info,
                    settings: b.settings(),
                }
            }
            None => DeviceStatus {
                device,
                registered: false,
                available: false,
                reason: Some(format!(
                    "not compiled in; rebuild with the Cargo feature `{}`",
                    device.cargo_feature()
                )),
                info: None,
                settings: Vec::new(),
            },
        })
        .collect()
}
