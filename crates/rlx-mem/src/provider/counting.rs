//! A provider that only simulates: fake addresses, no memory, every call counted.

use super::fake::FakeSpace;
use super::{Block, BlockProvider, ProviderStats};
use crate::align::check_align;
use crate::MemError;

/// Simulated device for replaying allocation traces larger than RAM. Blocks can grow in place
/// (like CUDA virtual-memory reservations) up to 1 TiB each.
#[derive(Debug)]
pub struct CountingProvider {
    space: FakeSpace,
    stats: ProviderStats,
}

impl CountingProvider {
    /// A fresh simulated device with no capacity limit.
    pub fn new() -> Self {
        CountingProvider {
            space: FakeSpace::new(),
            stats: ProviderStats::default(),
        }
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
}
