//! Block providers: the per-device layer that hands out and takes back big raw blocks.
//!
//! A backend implements [`BlockProvider`] only; pooling lives in the sub-allocator. Providers
//! here: [`HostProvider`] (real host memory), [`CountingProvider`] (fake addresses, for replaying
//! traces larger than RAM) and [`TestProvider`] (capacity cap, failure injection, call counts).
//!
//! Providers may also offer **virtual memory** (optional trait methods, "unsupported" by
//! default): reserve an address range, create physical granules, map and unmap them at
//! granule-aligned offsets of the range (CUDA `cuMemAddressReserve` / `cuMemCreate` /
//! `cuMemMap`; on the host `mmap(PROT_NONE)` plus `mprotect` / `madvise`). The sub-allocator's
//! expandable mode ([`crate::ExpandableConfig`]) is built on these.

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

/// An address range reserved with [`BlockProvider::reserve_virtual`]: no memory behind it until
/// granules are mapped into it.
#[derive(Debug, PartialEq, Eq)]
pub struct VirtualRange {
    /// Address of the first byte (granule aligned).
    pub addr: usize,
    /// Bytes of address space (a multiple of the granule).
    pub size: usize,
    /// Provider-private bookkeeping; callers must not change it.
    pub handle: u64,
}

/// One piece of physical memory from [`BlockProvider::create_physical`] (a whole number of the
/// provider's granules); it can be mapped at one place at a time and must be unmapped before it
/// is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PhysicalGranule {
    /// Provider-private handle (a CUDA allocation handle, or a counter).
    pub handle: u64,
    /// Bytes of physical memory (a multiple of [`BlockProvider::granule_size`]).
    pub size: usize,
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
    /// Successful virtual-range reservations.
    pub vm_reserves: u64,
    /// Virtual ranges released.
    pub vm_releases: u64,
    /// Physical granules created, of any size (each is counted in `live_bytes` while it exists).
    pub physical_creates: u64,
    /// Physical granules released.
    pub physical_releases: u64,
    /// Successful map calls (each maps a run of consecutive granules).
    pub map_calls: u64,
    /// Granules mapped by those calls, counted in [`BlockProvider::granule_size`] units.
    pub granules_mapped: u64,
    /// Unmap calls (each unmaps a run of consecutive granules).
    pub unmap_calls: u64,
    /// Granules unmapped by those calls, counted in [`BlockProvider::granule_size`] units.
    pub granules_unmapped: u64,
    /// Bytes currently mapped into virtual ranges.
    pub mapped_bytes: usize,
}

impl ProviderStats {
    /// Records a block handed out. Providers outside this crate call these too.
    pub fn on_alloc(&mut self, size: usize) {
        self.allocs += 1;
        self.live_blocks += 1;
        self.live_bytes += size;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
    }

    /// Records a block grown in place by `extra` bytes. Providers outside this crate call these too.
    pub fn on_grow(&mut self, extra: usize) {
        self.grows += 1;
        self.live_bytes += extra;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
    }

    /// Records a block given back. Providers outside this crate call these too.
    pub fn on_free(&mut self, size: usize) {
        self.frees += 1;
        self.live_blocks -= 1;
        self.live_bytes -= size;
    }

    /// Records a physical granule created. Providers outside this crate call these too.
    pub fn on_create(&mut self, bytes: usize) {
        self.physical_creates += 1;
        self.live_bytes += bytes;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
    }

    /// Records a physical granule released. Providers outside this crate call these too.
    pub fn on_release_physical(&mut self, bytes: usize) {
        self.physical_releases += 1;
        self.live_bytes -= bytes;
    }

    /// Records one map call of `granules` granules (`bytes` in all). Providers outside this crate call these too.
    pub fn on_map(&mut self, granules: usize, bytes: usize) {
        self.map_calls += 1;
        self.granules_mapped += granules as u64;
        self.mapped_bytes += bytes;
    }

    /// Records one unmap call of `granules` granules (`bytes` in all). Providers outside this crate call these too.
    pub fn on_unmap(&mut self, granules: usize, bytes: usize) {
        self.unmap_calls += 1;
        self.granules_unmapped += granules as u64;
        self.mapped_bytes -= bytes;
    }
}

/// The error a provider without virtual-memory support answers to the virtual-memory calls.
pub(crate) fn vm_unsupported(device: &str, requested: usize) -> MemError {
    MemError::ProviderFailed {
        device: device.to_string(),
        requested,
        reason: "virtual memory (reserve/map) is not supported by this provider".to_string(),
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

    /// Granule of physical memory for the virtual-memory calls (a power of two), or `None`
    /// when the provider has no virtual-memory support (the default).
    fn granule_size(&self) -> Option<usize> {
        None
    }

    /// Reserves `size` bytes of address space (a multiple of the granule), granule aligned,
    /// with nothing mapped.
    ///
    /// # Errors
    /// [`MemError::ProviderFailed`] when unsupported or the address space is exhausted.
    fn reserve_virtual(&mut self, size: usize) -> Result<VirtualRange, MemError> {
        Err(vm_unsupported(self.name(), size))
    }

    /// Gives back an address range; every granule in it must have been unmapped.
    fn release_virtual(&mut self, range: VirtualRange) {
        let _ = range;
    }

    /// Creates `size` bytes of physical memory, a non-zero multiple of the granule (CUDA
    /// `cuMemCreate`), counted against the capacity.
    ///
    /// # Errors
    /// [`MemError::ProviderFailed`] when unsupported, `size` is not a multiple of the granule,
    /// or the device is full.
    fn create_physical(&mut self, size: usize) -> Result<PhysicalGranule, MemError> {
        Err(vm_unsupported(self.name(), size))
    }

    /// Releases an unmapped physical granule.
    fn release_physical(&mut self, granule: PhysicalGranule) {
        let _ = granule;
    }

    /// Maps `granules` one after the other from `offset` bytes (granule aligned) into `range`
    /// (each at the offset where the previous one ends); the place must be unmapped, the
    /// granules not mapped elsewhere. One call per run.
    ///
    /// # Errors
    /// [`MemError::ProviderFailed`] when unsupported or the device refuses; nothing is mapped then.
    fn map(
        &mut self,
        range: &VirtualRange,
        offset: usize,
        granules: &[PhysicalGranule],
    ) -> Result<(), MemError> {
        let _ = (range, offset);
        Err(vm_unsupported(
            self.name(),
            granules.iter().map(|g| g.size).sum(),
        ))
    }

    /// Unmaps the `size` bytes at `offset` into `range`: whole physical granules mapped by
    /// [`BlockProvider::map`] (their memory is no longer reachable there; the physical granules
    /// stay alive until released).
    fn unmap(&mut self, range: &VirtualRange, offset: usize, size: usize) {
        let _ = (range, offset, size);
    }
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
    fn granule_size(&self) -> Option<usize> {
        (**self).granule_size()
    }
    fn reserve_virtual(&mut self, size: usize) -> Result<VirtualRange, MemError> {
        (**self).reserve_virtual(size)
    }
    fn release_virtual(&mut self, range: VirtualRange) {
        (**self).release_virtual(range)
    }
    fn create_physical(&mut self, size: usize) -> Result<PhysicalGranule, MemError> {
        (**self).create_physical(size)
    }
    fn release_physical(&mut self, granule: PhysicalGranule) {
        (**self).release_physical(granule)
    }
    fn map(
        &mut self,
        range: &VirtualRange,
        offset: usize,
        granules: &[PhysicalGranule],
    ) -> Result<(), MemError> {
        (**self).map(range, offset, granules)
    }
    fn unmap(&mut self, range: &VirtualRange, offset: usize, size: usize) {
        (**self).unmap(range, offset, size)
    }
}
