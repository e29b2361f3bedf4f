//! A provider that only simulates: fake addresses, no memory, every call counted.

use super::fake::FakeSpace;
use super::{Block, BlockProvider, PhysicalGranule, ProviderStats, VirtualRange};
use crate::align::check_align;
use crate::MemError;

/// Granule of the simulated device's virtual-memory calls: CUDA's usual VMM granularity.
pub const DEFAULT_GRANULE: usize = 2 << 20;

/// Simulated device for replaying allocation traces larger than RAM. Blocks can grow in place
/// (like CUDA virtual-memory reservations) up to 1 TiB each; virtual ranges, physical granules
/// and map/unmap calls are simulated and counted like CUDA VMM's.
#[derive(Debug)]
pub struct CountingProvider {
    space: FakeSpace,
    stats: ProviderStats,
    granule: usize,
    next_physical: u64,
}

impl CountingProvider {
    /// A fresh simulated device with no capacity limit and 2 MiB granules.
    pub fn new() -> Self {
        CountingProvider {
            space: FakeSpace::new(),
            stats: ProviderStats::default(),
            granule: DEFAULT_GRANULE,
            next_physical: 1,
        }
    }

    /// Sets the granule of the virtual-memory calls (rounded up to a power of two, at least 4 KiB).
    pub fn with_granule(mut self, bytes: usize) -> Self {
        self.granule = bytes.max(4096).next_power_of_two();
        self
    }
}

impl Default for CountingProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockProvider for CountingProvider {
    fn name(&self) -> &str {
        "counting"
    }

    fn alloc(&mut self, size: usize, align: usize, exportable: bool) -> Result<Block, MemError> {
        check_align(align)?;
        let (addr, window) =
            self.space
                .reserve(size, align)
                .ok_or_else(|| MemError::ProviderFailed {
                    device: self.name().to_string(),
                    requested: size,
                    reason: "fake address space exhausted".to_string(),
                })?;
        self.stats.on_alloc(size);
        Ok(Block {
            addr,
            size,
            align,
            exportable,
            handle: window as u64,
        })
    }

    fn free(&mut self, block: Block) {
        self.stats.on_free(block.size);
    }

    fn grow(&mut self, block: &mut Block, new_size: usize) -> Result<bool, MemError> {
        if new_size > block.handle as usize {
            return Ok(false);
        }
        if new_size > block.size {
            self.stats.on_grow(new_size - block.size);
            block.size = new_size;
        }
        Ok(true)
    }

    fn stats(&self) -> ProviderStats {
        self.stats
    }

    fn granule_size(&self) -> Option<usize> {
        Some(self.granule)
    }

    fn reserve_virtual(&mut self, size: usize) -> Result<VirtualRange, MemError> {
        let fail = || MemError::ProviderFailed {
            device: "counting".to_string(),
            requested: size,
            reason: "fake address space exhausted".to_string(),
        };
        let size = crate::align::align_up(size.max(1), self.granule).ok_or_else(fail)?;
        let (addr, _) = self.space.reserve(size, self.granule).ok_or_else(fail)?;
        self.stats.vm_reserves += 1;
        Ok(VirtualRange {
            addr,
            size,
            handle: 0,
        })
    }

    fn release_virtual(&mut self, _range: VirtualRange) {
        self.stats.vm_releases += 1;
    }

    fn create_physical(&mut self, size: usize) -> Result<PhysicalGranule, MemError> {
        if size == 0 || size % self.granule != 0 {
            return Err(MemError::ProviderFailed {
                device: "counting".to_string(),
                requested: size,
                reason: format!(
                    "physical size not a multiple of the granule {}",
                    self.granule
                ),
            });
        }
        self.stats.on_create(size);
        self.next_physical += 1;
        Ok(PhysicalGranule {
            handle: self.next_physical,
            size,
        })
    }

    fn release_physical(&mut self, granule: PhysicalGranule) {
        self.stats.on_release_physical(granule.size);
    }

    fn map(
        &mut self,
        _range: &VirtualRange,
        _offset: usize,
        granules: &[PhysicalGranule],
    ) -> Result<(), MemError> {
        let bytes = granules.iter().map(|g| g.size).sum();
        self.stats.on_map(bytes / self.granule, bytes);
        Ok(())
    }

    fn unmap(&mut self, _range: &VirtualRange, _offset: usize, size: usize) {
        self.stats.on_unmap(size / self.granule, size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_calls_and_returns_to_zero() {
        let mut provider = CountingProvider::new();
        let mut blocks = Vec::new();
        let mut total = 0;
        for step in 1..40usize {
            // Sizes far beyond this machine's RAM: nothing is touched.
            let size = step * 3 * (1 << 30) + step * 4096;
            let block = provider.alloc(size, 4096, step % 2 == 0).unwrap();
            assert_eq!(block.addr % 4096, 0);
            total += size;
            blocks.push(block);
        }
        assert_eq!(provider.stats().live_bytes, total);
        let mut first = blocks.remove(0);
        let old = first.size;
        assert!(provider.grow(&mut first, old + 12345).unwrap());
        assert_eq!(provider.stats().live_bytes, total + 12345);
        assert!(!provider.grow(&mut first, 1 << 41).unwrap());
        provider.free(first);
        for block in blocks {
            provider.free(block);
        }
        let stats = provider.stats();
        assert_eq!((stats.live_blocks, stats.live_bytes), (0, 0));
        assert_eq!((stats.allocs, stats.frees, stats.grows), (39, 39, 1));
        assert!(provider.alloc(10, 3, false).is_err());
    }

    #[test]
    fn virtual_memory_calls_are_counted() {
        let mut provider = CountingProvider::new().with_granule(3 << 20);
        let g = provider.granule_size().unwrap();
        assert_eq!(g, 4 << 20);
        let range = provider.reserve_virtual(10 * g + 1).unwrap();
        assert_eq!((range.addr % g, range.size), (0, 11 * g));
        let granules: Vec<_> = (0..3)
            .map(|_| provider.create_physical(g).unwrap())
            .collect();
        assert_ne!(granules[0], granules[1]);
        assert!(
            provider.create_physical(g + 1).is_err(),
            "not a granule multiple"
        );
        provider.map(&range, 2 * g, &granules).unwrap();
        let stats = provider.stats();
        assert_eq!((stats.physical_creates, stats.map_calls), (3, 1));
        assert_eq!((stats.live_bytes, stats.mapped_bytes), (3 * g, 3 * g));
        provider.unmap(&range, 2 * g, 3 * g);
        // Physical memory of several granules maps and unmaps as one piece.
        let big = provider.create_physical(4 * g).unwrap();
        provider.map(&range, 4 * g, &[big]).unwrap();
        assert_eq!(provider.stats().mapped_bytes, 4 * g);
        provider.unmap(&range, 4 * g, 4 * g);
        provider.release_physical(big);
        for granule in granules {
            provider.release_physical(granule);
        }
        provider.release_virtual(range);
        let stats = provider.stats();
        assert_eq!((stats.live_bytes, stats.mapped_bytes), (0, 0));
        assert_eq!((stats.unmap_calls, stats.granules_unmapped), (2, 7));
        assert_eq!((stats.vm_reserves, stats.vm_releases), (1, 1));
    }
}
