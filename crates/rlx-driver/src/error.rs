//! The error for "this device cannot be used", shared by every layer.

use crate::Device;

/// Why a device cannot compile or run a graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// No backend for the device was compiled in.
    #[error("no backend registered for device `{device}`; rebuild with the Cargo feature `{feature}` (e.g. `cargo build --features {feature}`)")]
    NotRegistered {
        /// The device asked for.
        device: Device,
        /// The Cargo feature that would register it.
        feature: &'static str,
    },
    /// The backend is compiled in but the hardware or driver is absent.
    #[error("device `{device}` is not available: {reason}")]
    Unavailable {
        /// The device asked for.
        device: Device,
        /// What is missing, in words a person can act on.
        reason: String,
    },
}
