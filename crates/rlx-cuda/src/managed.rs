//! Managed memory as an rlx-mem block provider, for models that do not fit on the device:
//! [`ManagedProvider`] hands out `cuMemAllocManaged` blocks, whose pages the driver migrates
//! between host and device. Blocks are placed in the order they are allocated: while the
//! blocks that prefer the device stay within the *device budget* a new block prefers the
//! device too; past it, a block prefers host memory and the device maps it (reads it over
//! the bus instead of faulting pages back and forth). [`Residency`] remembers every block and
//! its place, so a program can prefetch the device-preferred blocks it uses before a run
//! ([`Residency::prefetch`]). Pooling stays rlx-mem's, as for the plain provider.

use crate::device::CudaDevice;
use crate::mem_calls::{self, Advice, ManagedCaps, Place};
use crate::settings::ManagedOptions;
use crate::CudaError;
use cudarc::driver::sys;
use rlx_mem::{Block, BlockProvider, MemError, ProviderStats};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// Where a new block of `size` bytes should live, given the bytes of blocks already
/// preferring the device and the budget for them.
pub fn placement(device_bytes: usize, size: usize, budget: usize) -> Place {
    match device_bytes.checked_add(size) {
        Some(total) if total <= budget => Place::Device(0),
        _ => Place::Host,
    }
}

/// The budget in effect: the option, else the device's memory less 1/16 (room for the
/// driver, cuBLASLt workspaces and other processes' contexts).
pub fn resolve_budget(option: Option<usize>, device_bytes: u64) -> usize {
    option.unwrap_or_else(|| {
        let total = usize::try_from(device_bytes).unwrap_or(usize::MAX);
        total - total / 16
    })
}

/// Counters of the managed provider.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ResidencyStats {
    /// bytes of live blocks preferring the device
    pub device_bytes: usize,
    /// bytes of live blocks preferring the host
    pub host_bytes: usize,
    /// the device budget
    pub budget: usize,
    /// prefetch calls issued
    pub prefetches: u64,
    /// bytes those calls asked to move (already resident pages move nothing)
    pub prefetched_bytes: u64,
    /// whether advice and prefetch are given at all (see [`ManagedCaps::can_hint`])
    pub hinted: bool,
}

/// The managed blocks by base address, with their size and place.
#[derive(Debug, Default)]
struct Blocks {
    map: BTreeMap<u64, (usize, Place)>,
    stats: ResidencyStats,
}

/// Every live managed block and where it prefers to live; shared by the provider (which
/// adds and removes blocks) and the pool's owner (which prefetches).
#[derive(Debug, Default)]
pub struct Residency {
    blocks: Mutex<Blocks>,
}

impl Residency {
    fn lock(&self) -> std::sync::MutexGuard<'_, Blocks> {
        self.blocks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counters.
    pub fn stats(&self) -> ResidencyStats {
        self.lock().stats
    }

    /// The block holding address `ptr`: (base, bytes, place).
    pub fn block_of(&self, ptr: u64) -> Option<(u64, usize, Place)> {
        let b = self.lock();
        let (&base, &(size, place)) = b.map.range(..=ptr).next_back()?;
        (ptr < base + size as u64).then_some((base, size, place))
    }

    /// The device-preferred blocks holding any of `ptrs`, each once, by base address.
    pub fn device_blocks(&self, ptrs: &[u64]) -> Vec<(u64, usize)> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for &p in ptrs {
            if let Some((base, size, Place::Device(_))) = self.block_of(p) {
                if seen.insert(base) {
                    out.push((base, size));
                }
            }
        }
        out
    }

    /// Enqueues on `device`'s stream a prefetch to the device of every device-preferred
    /// block holding one of `ptrs` (host-preferred blocks stay where they are: moving them
    /// would break the budget). Returns the bytes asked for. Nothing happens without hints.
    ///
    /// # Errors
    /// The driver refuses a prefetch (named with its range).
    pub fn prefetch(&self, ptrs: &[u64], device: &CudaDevice) -> Result<usize, CudaError> {
        if !self.stats().hinted {
            return Ok(0);
        }
        let blocks = self.device_blocks(ptrs);
        let mut bytes = 0;
        for &(base, size) in &blocks {
            mem_calls::prefetch(base, size, Place::Device(0), device)?;
            bytes += size;
        }
        let mut b = self.lock();
        b.stats.prefetches += blocks.len() as u64;
        b.stats.prefetched_bytes += bytes as u64;
        Ok(bytes)
    }
}

/// Managed blocks from the driver (see the module documentation).
pub struct ManagedProvider {
    stats: ProviderStats,
    caps: ManagedCaps,
    options: ManagedOptions,
    residency: Arc<Residency>,
}

impl ManagedProvider {
    /// A provider for device 0 (whose context the caller has bound), with `budget` bytes of
    /// device-preferred blocks.
    ///
    /// # Errors
    /// The device has no managed memory.
    pub fn new(
        device: sys::CUdevice,
        options: ManagedOptions,
        budget: usize,
    ) -> Result<ManagedProvider, CudaError> {
        let caps = ManagedCaps::query(device)?;
        if !caps.managed {
            return Err(CudaError::Unavailable(
                "RLX_CUDA_MEMORY=managed: the device has no managed memory \
                 (CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY is 0)"
                    .into(),
            ));
        }
        let residency = Arc::new(Residency::default());
        {
            let mut b = residency.lock();
            b.stats.budget = budget;
            b.stats.hinted = options.advise && caps.can_hint();
        }
        Ok(ManagedProvider {
            stats: ProviderStats::default(),
            caps,
            options,
            residency,
        })
    }

    /// The blocks and their places, shared.
    pub fn residency(&self) -> Arc<Residency> {
        self.residency.clone()
    }

    /// What the driver offers.
    pub fn caps(&self) -> ManagedCaps {
        self.caps
    }

    /// Advises the driver where `base..base + bytes` lives: its place preferred, and mapped
    /// for the device either way (so the device reads host-preferred pages in place).
    fn advise(&self, base: u64, bytes: usize, place: Place) -> Result<(), CudaError> {
        mem_calls::advise(base, bytes, Advice::PreferredLocation(place))?;
        mem_calls::advise(base, bytes, Advice::AccessedBy(Place::Device(0)))
    }
}

impl BlockProvider for ManagedProvider {
    fn name(&self) -> &str {
        "cuda:0 (managed)"
    }

    fn alloc(&mut self, size: usize, align: usize, exportable: bool) -> Result<Block, MemError> {
        if !align.is_power_of_two() {
            return Err(MemError::BadAlignment { align });
        }
        let fail = |reason: String| MemError::ProviderFailed {
            device: "cuda:0 (managed)".into(),
            requested: size,
            reason,
        };
        if exportable {
            return Err(fail("managed blocks cannot be exported".into()));
        }
        // Managed allocations are aligned to at least 256 bytes; more over-allocates.
        let bytes = (size + align.saturating_sub(256)).max(1);
        let raw = mem_calls::alloc_managed(bytes).map_err(|e| fail(e.to_string()))?;
        let place = {
            let b = self.residency.lock();
            placement(b.stats.device_bytes, bytes, b.stats.budget)
        };
        if self.residency.stats().hinted {
            if let Err(e) = self.advise(raw, bytes, place) {
                let _ = mem_calls::free(raw);
                return Err(fail(e.to_string()));
            }
        }
        {
            let mut b = self.residency.lock();
            b.map.insert(raw, (bytes, place));
            match place {
                Place::Device(_) => b.stats.device_bytes += bytes,
                Place::Host => b.stats.host_bytes += bytes,
            }
        }
        self.stats.on_alloc(size);
        Ok(Block {
            addr: (raw as usize).div_ceil(align) * align,
            size,
            align,
            exportable,
            handle: raw,
        })
    }

    fn free(&mut self, block: Block) {
        let _ = mem_calls::free(block.handle);
        let mut b = self.residency.lock();
        if let Some((bytes, place)) = b.map.remove(&block.handle) {
            match place {
                Place::Device(_) => b.stats.device_bytes -= bytes,
                Place::Host => b.stats.host_bytes -= bytes,
            }
        }
        drop(b);
        self.stats.on_free(block.size);
    }

    fn stats(&self) -> ProviderStats {
        self.stats
    }
}

impl std::fmt::Debug for ManagedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedProvider")
            .field("caps", &self.caps)
            .field("options", &self.options)
            .field("residency", &self.residency.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_prefer_the_device_until_the_budget() {
        let budget = 100;
        let mut device = 0;
        let mut places = Vec::new();
        for size in [40, 40, 30, 20, 10, 200] {
            let p = placement(device, size, budget);
            if p == Place::Device(0) {
                device += size;
            }
            places.push(p);
        }
        use Place::*;
        assert_eq!(places, [Device(0), Device(0), Host, Device(0), Host, Host]);
        assert_eq!(device, 100);
        assert_eq!(placement(usize::MAX, 1, usize::MAX), Host);
        assert_eq!(placement(0, 0, 0), Device(0));
    }

    #[test]
    fn default_budget_leaves_a_sixteenth() {
        assert_eq!(resolve_budget(Some(123), 1 << 30), 123);
        assert_eq!(resolve_budget(None, 16 << 30), 15 << 30);
    }

    #[test]
    fn blocks_are_found_by_any_address_inside() {
        let r = Residency::default();
        {
            let mut b = r.lock();
            b.map.insert(1000, (100, Place::Device(0)));
            b.map.insert(2000, (50, Place::Host));
            b.map.insert(3000, (10, Place::Device(0)));
        }
        assert_eq!(r.block_of(999), None);
        assert_eq!(r.block_of(1000), Some((1000, 100, Place::Device(0))));
        assert_eq!(r.block_of(1099), Some((1000, 100, Place::Device(0))));
        assert_eq!(r.block_of(1100), None);
        assert_eq!(r.block_of(2049), Some((2000, 50, Place::Host)));
        assert_eq!(
            r.device_blocks(&[1050, 2010, 1000, 3005, 5000, 1099]),
            [(1000, 100), (3000, 10)]
        );
    }
}
