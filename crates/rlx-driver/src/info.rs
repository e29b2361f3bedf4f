//! What a backend says about its device: whether it can run now, and its facts.

/// Whether a device can be used right now, and if not, why in words a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Availability {
    /// True when hardware and driver are present and usable now.
    pub available: bool,
    /// Why the device is not available (or extra facts when it is).
    pub reason: Option<String>,
}

impl Availability {
    /// The device is usable.
    pub fn yes() -> Self {
        Availability {
            available: true,
            reason: None,
        }
    }

    /// The device is not usable, for the given reason.
    pub fn no(reason: impl Into<String>) -> Self {
        Availability {
            available: false,
            reason: Some(reason.into()),
        }
    }
}

/// Facts about a concrete device, shown by `rlx devices`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct DeviceInfo {
    /// Marketing or adapter name, e.g. "NVIDIA H200" or the CPU model.
    pub name: String,
    /// Total device memory in bytes, when known.
    pub memory_bytes: Option<u64>,
    /// Compute units: CPU threads, SMs, or compute units.
    pub compute_units: Option<u32>,
    /// Architecture string, e.g. "sm_90" or "x86_64".
    pub arch: Option<String>,
    /// A software implementation running on the CPU (Mesa lavapipe or llvmpipe): correct,
    /// but slower than the CPU backend, so `auto` never picks it.
    pub software: bool,
}
