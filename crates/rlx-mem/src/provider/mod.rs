//! Block providers: the per-device layer that hands out and takes back big raw blocks.
//!
//! A backend implements [`BlockProvider`] only; pooling lives in the sub-allocator. Providers
//! here: [`HostProvider`] (real host memory), [`CountingProvider`] (fake addresses, for replaying
//! traces larger than RAM) and [`TestProvider`] (capacity cap, failure injection, call counts).

mod counting;
mod fake;
mod host;
mod testing;

pub use counting::CountingProvider;
pub use host::HostProvider;
pub use testing::TestProvider;

use serde::Serialize;

use crate::MemError;

/// A raw block of device memory owned by whoever holds it; give it back with [`BlockProvider::free`].
#[derive(Debug, PartialEq, Eq)]
pub struct Block {
    /// Device address of the first byte (a host pointer, or a fake address for simulation).
    pub addr: usize,
    /// Bytes usable from `addr`; grows when [`BlockProvider::grow`] succeeds.
    pub size: usize,
    /// Alignment the block was asked with.
    pub align: usize,
    /// Whether the block can be exported to another API (CUDA <-> Vulkan interop).
    pub exportable: bool,
    /// Provider-private bookkeeping; callers must not change it.
    pub handle: u64,
}

/// What a provider has done so far, for tests and reports.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProviderStats {
    /// Successful `alloc` calls.
    pub allocs: u64,
    /// `free` calls.
    pub frees: u64,
    /// Successful in-place `grow` calls.
    pub grows: u64,
    /// Blocks handed out and not yet freed.
    pub live_blocks: u64,
    /// Bytes of those blocks.
    pub live_bytes: usize,
    /// Highest `live_bytes` seen.
    pub peak_live_bytes: usize,
}

impl ProviderStats {
    pub(crate) fn on_alloc(&mut self, size: usize) {
        self.allocs += 1;
        self.live_blocks += 1;
        self.live_bytes += size;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
    }

    pub(crate) fn on_grow(&mut self, extra: usize) {
        self.grows += 1;
        self.live_bytes += extra;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
    }

    pub(crate) fn on_free(&mut self, size: usize) {
        self.frees += 1;
        self.live_blocks -= 1;
        self.live_bytes -= size;
    }
}

/// The per-device source of raw blocks. Keep it small: everything else is device independent.
pub trait BlockProvider: Send {
    /// Device name used in errors and reports, e.g. `host` or `cuda:0`.
    fn name(&self) -> &str;

    /// Hands out a block of at least `size` bytes aligned to `align`.
    ///
    /// # Errors
    /// [`MemError::ProviderFailed`] when the device has no room (or refuses `exportable`), and
    /// [`MemError::BadAlignment`] when `align` is not a power of two.
    fn alloc(&mut self, size: usize, align: usize, exportable: bool) -> Result<Block, MemError>;

    /// Takes a block back. The block must come from this provider.
    fn free(&mut self, block: Block);

    /// Extends `block` in place to `new_size` bytes (virtual-memory reservations, as CUDA VMM
    /// does), so a pool can grow without splitting its address range. Returns `Ok(false)` when the
    /// provider cannot grow this block; the caller then allocates a new block instead.
    ///
    /// # Errors
    /// [`MemError::ProviderFailed`] when the device has no memory left for the extension.
    fn grow(&mut self, block: &mut Block, new_size: usize) -> Result<bool, MemError> {
        let _ = (block, new_size);
        Ok(false)
    }

    /// Total bytes this provider may hand out, when bounded.
    fn capacity(&self) -> Option<usize> {
        None
    }

    /// Counters of calls and live bytes.
    fn stats(&self) -> ProviderStats;
}

impl BlockProvider for Box<dyn BlockProvider> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn alloc(&mut self, size: usize, align: usize, exportable: bool) -> Result<Block, MemError> {
        (**self).alloc(size, align, exportable)
    }
    fn free(&mut self, block: Block) {
        (**self).free(block)
    }
    fn grow(&mut self, block: &mut Block, new_size: usize) -> Result<bool, MemError> {
        (**self).grow(block, new_size)
    }
    fn capacity(&self) -> Option<usize> {
        (**self).capacity()
    }
    fn stats(&self) -> ProviderStats {
        (**self).stats()
    }
}
