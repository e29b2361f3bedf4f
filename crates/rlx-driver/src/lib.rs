//! Device identities for RLX: the [`Device`] enum, honest availability answers
//! ([`Availability`]), device facts ([`DeviceInfo`]) and the error every layer uses to say
//! that a device cannot be used ([`DeviceError`]).
//!
//! This crate probes nothing heavy by itself: backends answer availability for their own
//! device, and this crate only gives the shared vocabulary.

mod device;
mod error;
mod info;
pub mod settings;
pub mod testing;

pub use device::{Device, ParseDeviceError};
pub use error::DeviceError;
pub use info::{Availability, DeviceInfo};
pub use settings::{Knob, Setting};
