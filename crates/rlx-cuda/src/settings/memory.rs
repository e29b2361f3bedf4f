//! The CUDA backend's memory settings, parsed once from their knobs ([`MEMORY_KNOBS`]) into
//! [`MemorySettings`]: which provider device memory comes from (`RLX_CUDA_MEMORY`), the
//! managed provider's device budget, prefetch and advice, and the size of the pinned
//! staging pool every upload and download goes through.

use crate::CudaError;
use rlx_driver::Knob;
use std::sync::OnceLock;

/// Where device memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MemoryKind {
    /// Device memory only, failing when the device is full (the default): expandable segments
    /// (a virtual reservation whose physical pieces are mapped as they are needed, `cuMemCreate`
    /// + `cuMemMap`) where the driver has the VMM API, `cuMemAlloc` blocks where it has not
    #[default]
    Device,
    /// `cuMemAlloc` blocks even where the driver has the VMM API (the fallback, for comparison)
    Blocks,
    /// `cuMemAllocManaged` blocks: pages migrate between host and device, so models larger
    /// than the device still run (slower past the budget)
    Managed(ManagedOptions),
}

/// How the managed provider places and moves its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ManagedOptions {
    /// bytes of blocks that prefer the device; blocks past it prefer host memory and are read
    /// by the device over the bus (None: the device's total memory less 1/16 for the driver)
    pub device_budget: Option<usize>,
    /// when a program's device-preferred memory is prefetched to the device
    pub prefetch: Prefetch,
    /// give the driver preferred-location and accessed-by hints per block
    pub advise: bool,
}

impl Default for ManagedOptions {
    fn default() -> Self {
        ManagedOptions {
            device_budget: None,
            prefetch: Prefetch::EveryRun,
            advise: true,
        }
    }
}

/// When a program prefetches its managed memory to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prefetch {
    /// never: pages move on first touch (`RLX_CUDA_MANAGED_PREFETCH=0`)
    Off,
    /// once, before the first run (`compile`)
    Once,
    /// before every run, so pages another program pushed out come back in one transfer
    /// instead of fault by fault (`run`, the default)
    EveryRun,
}

/// Every memory setting of the CUDA backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemorySettings {
    /// the provider of device memory (`RLX_CUDA_MEMORY`)
    pub memory: MemoryKind,
    /// bytes of pinned host memory in the staging pool (`RLX_CUDA_STAGING`)
    pub staging_bytes: usize,
    /// largest piece one copy is split into, so copies of several pieces overlap the host's
    /// copy into the pool with the transfer (`RLX_CUDA_STAGING_CHUNK`)
    pub staging_chunk: usize,
}

/// Default size of the staging pool.
pub const STAGING_BYTES: usize = 64 << 20;
/// Default staging chunk.
pub const STAGING_CHUNK: usize = 4 << 20;

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            memory: MemoryKind::Device,
            staging_bytes: STAGING_BYTES,
            staging_chunk: STAGING_CHUNK,
        }
    }
}

/// The memory knobs, in the order `rlx devices --settings` lists them.
pub const MEMORY_KNOBS: [Knob; 6] = [
    Knob {
        name: "RLX_CUDA_MEMORY",
        default: "device",
        help: "device memory provider: device (expandable VMM segments, cuMemAlloc blocks where the driver lacks VMM), blocks (cuMemAlloc blocks always) or managed (cuMemAllocManaged, for models larger than the device)",
    },
    Knob {
        name: "RLX_CUDA_MANAGED_BUDGET",
        default: "device memory less 1/16",
        help: "managed: bytes of blocks that prefer the device (K/M/G suffixes); later blocks prefer the host",
    },
    Knob {
        name: "RLX_CUDA_MANAGED_PREFETCH",
        default: "run",
        help: "managed: prefetch a program's device-preferred memory before every run (run), the first (once) or never (0)",
    },
    Knob {
        name: "RLX_CUDA_MANAGED_ADVISE",
        default: "1",
        help: "managed: preferred-location and accessed-by hints per block (0 turns them off)",
    },
    Knob {
        name: "RLX_CUDA_STAGING",
        default: "64M",
        help: "bytes of pinned host memory staging every upload and download",
    },
    Knob {
        name: "RLX_CUDA_STAGING_CHUNK",
        default: "4M",
        help: "largest piece of one staged copy (at most half the pool, so two pieces overlap)",
    },
];

pub use rlx_driver::settings::parse_bytes;

impl MemorySettings {
    /// Parses the settings from `lookup` (a variable's value, or None when unset): pure, so
    /// tests pass a map instead of changing the environment.
    ///
    /// # Errors
    /// Every malformed value, named with its variable and what it should be, in one message.
    pub fn parse(lookup: impl Fn(&str) -> Option<String>) -> Result<MemorySettings, String> {
        let mut errors = Vec::new();
        let mut bytes = |name: &str, default: Option<usize>| match lookup(name) {
            None => default,
            Some(v) => match parse_bytes(&v) {
                Some(n) if n > 0 => Some(n),
                _ => {
                    errors.push(format!("{name}={v:?}: expected a byte count such as 64M"));
                    default
                }
            },
        };
        let budget = bytes("RLX_CUDA_MANAGED_BUDGET", None);
        let staging_bytes = bytes("RLX_CUDA_STAGING", Some(STAGING_BYTES)).unwrap_or_default();
        let chunk = bytes("RLX_CUDA_STAGING_CHUNK", Some(STAGING_CHUNK)).unwrap_or_default();
        let prefetch = match lookup("RLX_CUDA_MANAGED_PREFETCH").as_deref() {
            None | Some("run") | Some("1") => Prefetch::EveryRun,
            Some("once") => Prefetch::Once,
            Some("0") => Prefetch::Off,
            Some(v) => {
                errors.push(format!(
                    "RLX_CUDA_MANAGED_PREFETCH={v:?}: expected run, once or 0"
                ));
                Prefetch::EveryRun
            }
        };
        let advise = match lookup("RLX_CUDA_MANAGED_ADVISE").as_deref() {
            None | Some("1") => true,
            Some("0") => false,
            Some(v) => {
                errors.push(format!("RLX_CUDA_MANAGED_ADVISE={v:?}: expected 0 or 1"));
                true
            }
        };
        let memory = match lookup("RLX_CUDA_MEMORY").as_deref() {
            None | Some("device") => MemoryKind::Device,
            Some("blocks") => MemoryKind::Blocks,
            Some("managed") => MemoryKind::Managed(ManagedOptions {
                device_budget: budget,
                prefetch,
                advise,
            }),
            Some(v) => {
                errors.push(format!(
                    "RLX_CUDA_MEMORY={v:?}: expected device, blocks or managed"
                ));
                MemoryKind::Device
            }
        };
        if errors.is_empty() {
            Ok(MemorySettings {
                memory,
                staging_bytes,
                staging_chunk: chunk,
            })
        } else {
            Err(errors.join("; "))
        }
    }

    /// The settings of this process's environment, parsed once.
    ///
    /// # Errors
    /// [`CudaError::Invalid`] naming each malformed variable.
    pub fn get() -> Result<&'static MemorySettings, CudaError> {
        static SETTINGS: OnceLock<Result<MemorySettings, String>> = OnceLock::new();
        SETTINGS
            .get_or_init(|| {
                MemorySettings::parse(|name| {
                    MEMORY_KNOBS
                        .iter()
                        .find(|k| k.name == name)
                        .and_then(Knob::raw)
                })
            })
            .as_ref()
            .map_err(|e| CudaError::Invalid(format!("CUDA memory settings: {e}")))
    }

    /// The settings of the environment, or the defaults when it is malformed (the error is
    /// reported where memory is first taken, [`crate::memory::DeviceMemory::get`]).
    pub fn or_default() -> MemorySettings {
        MemorySettings::get().cloned().unwrap_or_default()
    }

    /// The staging chunk actually used: the setting, at most half the pool (so one piece
    /// is filled while the other is in flight), at least 4 KiB.
    pub fn chunk(&self) -> usize {
        effective_chunk(self.staging_bytes, self.staging_chunk)
    }
}

/// The chunk a pool of `capacity` bytes uses when `chunk` is asked for: at most half the
/// pool, at least 4 KiB, a multiple of 4 KiB (page-sized pieces transfer at full speed).
pub fn effective_chunk(capacity: usize, chunk: usize) -> usize {
    let page = 4096;
    let half = (capacity / 2) / page * page;
    (chunk.min(half) / page * page).max(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<MemorySettings, String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        MemorySettings::parse(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_when_unset() {
        let s = parse(&[]).unwrap();
        assert_eq!(s, MemorySettings::default());
        assert_eq!(s.memory, MemoryKind::Device);
        assert_eq!(s.chunk(), STAGING_CHUNK);
    }

    #[test]
    fn managed_with_every_option() {
        let s = parse(&[
            ("RLX_CUDA_MEMORY", "managed"),
            ("RLX_CUDA_MANAGED_BUDGET", "8G"),
            ("RLX_CUDA_MANAGED_PREFETCH", "once"),
            ("RLX_CUDA_MANAGED_ADVISE", "0"),
            ("RLX_CUDA_STAGING", "256M"),
            ("RLX_CUDA_STAGING_CHUNK", "16M"),
        ])
        .unwrap();
        assert_eq!(
            s.memory,
            MemoryKind::Managed(ManagedOptions {
                device_budget: Some(8 << 30),
                prefetch: Prefetch::Once,
                advise: false,
            })
        );
        assert_eq!((s.staging_bytes, s.chunk()), (256 << 20, 16 << 20));
        let s = parse(&[("RLX_CUDA_MEMORY", "managed")]).unwrap();
        assert_eq!(s.memory, MemoryKind::Managed(ManagedOptions::default()));
    }

    #[test]
    fn managed_knobs_without_managed_memory_change_nothing() {
        let s = parse(&[("RLX_CUDA_MANAGED_BUDGET", "1G")]).unwrap();
        assert_eq!(s.memory, MemoryKind::Device);
    }

    #[test]
    fn every_malformed_value_is_named_at_once() {
        let e = parse(&[
            ("RLX_CUDA_MEMORY", "unified"),
            ("RLX_CUDA_STAGING", "lots"),
            ("RLX_CUDA_STAGING_CHUNK", "0"),
            ("RLX_CUDA_MANAGED_PREFETCH", "always"),
            ("RLX_CUDA_MANAGED_ADVISE", "yes"),
        ])
        .unwrap_err();
        for name in [
            "RLX_CUDA_MEMORY=\"unified\"",
            "RLX_CUDA_STAGING=\"lots\"",
            "RLX_CUDA_STAGING_CHUNK=\"0\"",
            "RLX_CUDA_MANAGED_PREFETCH=\"always\"",
            "RLX_CUDA_MANAGED_ADVISE=\"yes\"",
        ] {
            assert!(e.contains(name), "{name} missing from {e}");
        }
    }

    #[test]
    fn chunks_leave_room_for_two() {
        assert_eq!(effective_chunk(64 << 20, 4 << 20), 4 << 20);
        assert_eq!(effective_chunk(4 << 20, 64 << 20), 2 << 20);
        assert_eq!(effective_chunk(1 << 20, 100_000), 98_304);
        assert_eq!(effective_chunk(4096, 1 << 20), 4096);
        for cap in [8192usize, 1 << 20, 3 << 20, 100 << 20] {
            for want in [1usize, 5000, 1 << 20, 1 << 30] {
                let c = effective_chunk(cap, want);
                assert!(
                    c.is_multiple_of(4096) && 2 * c <= cap.max(8192),
                    "{cap} {want} -> {c}"
                );
            }
        }
    }

    #[test]
    fn every_parsed_variable_is_a_declared_knob() {
        let seen = std::cell::RefCell::new(Vec::new());
        let _ = MemorySettings::parse(|name| {
            seen.borrow_mut().push(name.to_string());
            None
        });
        for name in seen.borrow().iter() {
            assert!(MEMORY_KNOBS.iter().any(|k| k.name == name), "{name}");
        }
        assert_eq!(seen.borrow().len(), MEMORY_KNOBS.len());
    }
}
