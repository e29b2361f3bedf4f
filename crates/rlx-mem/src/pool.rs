//! The device-independent sub-allocator: carves provider blocks with TLSF, grows blocks in
//! place when the provider can, sends large requests to dedicated blocks, releases empty blocks
//! (keeping one in reserve), reuses stream-freed ranges in stream order, and recovers from out
//! of memory by trimming its caches and retrying once.
//!
//! In expandable mode ([`AllocatorConfig::expandable`]) the ranges live in large virtual
//! segments instead of blocks, and physical granules are mapped under them on demand
//! (see [`crate::ExpandableConfig`]).

use std::sync::atomic::{AtomicU32, Ordering};

use crate::align::{check_align, round_size};
use crate::dedicated::{DedicatedCache, SlotId};
use crate::expandable::{Expandable, ExpandableConfig};
use crate::provider::{Block, BlockProvider};
use crate::stats::Stats;
use crate::stream::{CompletionToken, PendingRanges, StreamId, Synchronous, TokenSource};
use crate::tlsf::{NodeId, RegionId, Tlsf, UNIT};
use crate::MemError;

/// Gives each allocator an id, so an allocation cannot be freed into the wrong one.
static NEXT_ALLOCATOR_ID: AtomicU32 = AtomicU32::new(1);

/// How a sub-allocator asks its provider for memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatorConfig {
    /// Size of a fresh pool block (a growable block starts at this size).
    pub block_size: usize,
    /// Requests above this many bytes get a dedicated block. `None`: half a block when blocks
    /// cannot grow; never when they can, since one growing range packs large and small
    /// tensors together (the way expandable segments do).
    pub dedicated_threshold: Option<usize>,
    /// Extend the last block in place when the provider supports it, instead of adding blocks.
    pub grow_in_place: bool,
    /// Blocks and growth steps are rounded up to this many bytes (a power of two).
    pub granule: usize,
    /// Empty pool blocks kept cached rather than returned to the provider.
    pub keep_empty_blocks: usize,
    /// Ask the provider for blocks that can be exported for interop.
    pub exportable: bool,
    /// Expandable segments: one large virtual range with physical granules mapped on demand,
    /// instead of blocks. Needs a provider with virtual memory
    /// ([`BlockProvider::granule_size`]); without one the allocator uses blocks
    /// ([`SubAllocator::is_expandable`] says which). `block_size`, `grow_in_place`, `granule`
    /// and `keep_empty_blocks` do not apply to it.
    pub expandable: Option<ExpandableConfig>,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            block_size: 64 << 20,
            dedicated_threshold: None,
            grow_in_place: true,
            granule: 2 << 20,
            keep_empty_blocks: 1,
            exportable: false,
            expandable: None,
        }
    }
}

/// Memory handed out by a [`SubAllocator`]. Not `Clone`: it is freed exactly once, by value.
#[derive(Debug, PartialEq, Eq)]
pub struct Allocation {
    addr: usize,
    size: usize,
    place: Place,
    owner: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Pooled(NodeId),
    Dedicated(SlotId),
}

impl Allocation {
    /// Device address of the first byte.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Bytes asked for.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the allocation has a dedicated block of its own.
    pub fn is_dedicated(&self) -> bool {
        matches!(self.place, Place::Dedicated(_))
    }
}

#[derive(Debug)]
struct PoolBlock {
    block: Block,
    can_grow: bool,
}

/// TLSF sub-allocator over the blocks of one provider.
pub struct SubAllocator {
    provider: Box<dyn BlockProvider>,
    tokens: Box<dyn TokenSource>,
    config: AllocatorConfig,
    tlsf: Tlsf,
    blocks: Vec<Option<PoolBlock>>,
    empty: Vec<RegionId>,
    dedicated: DedicatedCache,
    pending: PendingRanges,
    stats: Stats,
    id: u32,
    vm: Option<Expandable>,
}

impl SubAllocator {
    /// A sub-allocator over `provider`; every token counts as complete until
    /// [`SubAllocator::set_token_source`] says otherwise.
    pub fn new(provider: Box<dyn BlockProvider>, config: AllocatorConfig) -> Self {
        let mut config = config;
        config.granule = config.granule.max(UNIT).next_power_of_two();
        config.block_size = config.block_size.max(config.granule);
        let vm = match (&config.expandable, provider.granule_size()) {
            (Some(cfg), Some(granule)) if granule.is_power_of_two() && granule >= UNIT => {
                Some(Expandable::new(cfg.clone(), granule))
            }
            _ => None,
        };
        SubAllocator {
            provider,
            tokens: Box::new(Synchronous),
            config,
            tlsf: Tlsf::new(),
            blocks: Vec::new(),
            empty: Vec::new(),
            dedicated: DedicatedCache::default(),
            pending: PendingRanges::default(),
            stats: Stats::default(),
            id: NEXT_ALLOCATOR_ID.fetch_add(1, Ordering::Relaxed),
            vm,
        }
    }

    /// Whether the allocator runs in expandable mode (asked for, and the provider has virtual memory).
    pub fn is_expandable(&self) -> bool {
        self.vm.is_some()
    }

    /// Granule of the expandable mode (the provider's; pieces are power-of-two multiples of
    /// it), `None` in block mode.
    pub fn granule_size(&self) -> Option<usize> {
        self.vm.as_ref().map(Expandable::granule)
    }

    /// Expandable mode: the piece-size policy in effect.
    pub fn granule_policy(&self) -> Option<crate::GranulePolicy> {
        self.vm.as_ref().map(Expandable::policy)
    }

    /// A scale hint: about `peak` bytes will be in use at once (weights, caches, planned
    /// arenas). In expandable mode, pieces are created at least `peak` /
    /// [`crate::EXPECTED_PIECES`] large from now on (the largest hint counts); nothing in
    /// block mode.
    pub fn expect_peak(&mut self, peak: usize) {
        if let Some(vm) = self.vm.as_mut() {
            vm.expect_peak(peak);
        }
    }

    /// Expandable mode: physical pieces created so far, as (bytes, count) by ascending size.
    pub fn granules_created(&self) -> Vec<(usize, u64)> {
        self.vm
            .as_ref()
            .map(Expandable::created_sizes)
            .unwrap_or_default()
    }

    /// Sets what answers whether stream work has completed (events, fences, a fake timeline).
    pub fn set_token_source(&mut self, tokens: Box<dyn TokenSource>) {
        self.tokens = tokens;
    }

    /// The provider underneath, e.g. to read its counters.
    pub fn provider(&self) -> &dyn BlockProvider {
        self.provider.as_ref()
    }

    /// The configuration in effect (granule and block size normalized).
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// Requests above this many bytes get a dedicated block.
    pub fn dedicated_threshold(&self) -> usize {
        match self.config.dedicated_threshold {
            Some(bytes) => bytes,
            None if self.config.grow_in_place || self.vm.is_some() => usize::MAX,
            None => self.config.block_size / 2,
        }
    }

    /// Allocates `size` bytes aligned to `align` (a power of two).
    ///
    /// # Errors
    /// [`MemError::BadAlignment`], [`MemError::SizeOverflow`], and [`MemError::OutOfMemory`] once
    /// the provider failed, cached memory was returned, and one retry failed too.
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<Allocation, MemError> {
        self.alloc_inner(size, align, None)
    }

    /// Allocates for work on `stream`: ranges freed on the same stream are reused at once,
    /// ranges freed on other streams only after their token completed.
    ///
    /// # Errors
    /// As [`SubAllocator::alloc`].
    pub fn alloc_on(
        &mut self,
        stream: StreamId,
        size: usize,
        align: usize,
    ) -> Result<Allocation, MemError> {
        self.alloc_inner(size, align, Some(stream))
    }

    /// Frees an allocation for immediate reuse.
    ///
    /// # Errors
    /// [`MemError::ForeignAllocation`] when the allocation came from another allocator.
    pub fn free(&mut self, allocation: Allocation) -> Result<(), MemError> {
        self.check_owner(&allocation)?;
        self.stats.on_free(allocation.size);
        match allocation.place {
            Place::Pooled(node) => match self.vm.as_mut() {
                Some(vm) => {
                    let freed = self.tlsf.free_range(node);
                    vm.on_free(self.provider.as_mut(), &mut self.stats, freed);
                }
                None => {
                    let region = self.tlsf.free(node);
                    self.after_free(region);
                }
            },
            Place::Dedicated(slot) => self.dedicated.release(slot, None),
        }
        Ok(())
    }

    /// Frees an allocation whose last use was queued on `token.stream` before `token`: that
    /// stream may reuse it at once, other streams once `token` completes.
    ///
    /// # Errors
    /// [`MemError::ForeignAllocation`] when the allocation came from another allocator.
    pub fn free_on(
        &mut self,
        allocation: Allocation,
        token: CompletionToken,
    ) -> Result<(), MemError> {
        self.check_owner(&allocation)?;
        self.stats.on_free(allocation.size);
        match allocation.place {
            Place::Pooled(node) => {
                self.tlsf.mark_pending(node);
                self.pending.push(&self.tlsf, node, token);
            }
            Place::Dedicated(slot) => self.dedicated.release(slot, Some(token)),
        }
        Ok(())
    }

    /// Makes ranges whose stream tokens completed available to every stream.
    pub fn process_completions(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let freed = self
            .pending
            .release_completed(&mut self.tlsf, self.tokens.as_ref());
        for f in freed {
            if let Some(vm) = self.vm.as_mut() {
                vm.on_free(self.provider.as_mut(), &mut self.stats, f);
            } else if self.blocks[f.region as usize].is_some() {
                self.after_free(f.region);
            }
        }
    }

    /// Returns every cached block (empty pool blocks, idle dedicated blocks) to the provider;
    /// in expandable mode also unmaps every cached granule, releases every pooled physical
    /// granule and gives back segments with nothing in them. Returns the bytes released.
    pub fn trim(&mut self) -> usize {
        self.process_completions();
        let before = self.stats.bytes_reserved;
        for region in std::mem::take(&mut self.empty) {
            self.release_region(region);
        }
        for block in self.dedicated.drain_idle(self.tokens.as_ref()) {
            self.return_block(block);
        }
        if let Some(vm) = self.vm.as_mut() {
            vm.trim(self.provider.as_mut(), &mut self.stats);
            for region in vm.regions() {
                if self.tlsf.region_is_empty(region) && vm.is_unmapped(region) {
                    self.tlsf.remove_region(region);
                    vm.release_segment(self.provider.as_mut(), region);
                }
            }
        }
        before - self.stats.bytes_reserved
    }

    /// The provider block holding an allocation (a buffer handle for APIs that need one);
    /// the allocation starts `allocation.addr() - block.addr` bytes into it. `None` for an
    /// allocation in an expandable segment (its address is a plain device address).
    pub fn block_of(&self, allocation: &Allocation) -> Option<&Block> {
        if allocation.owner != self.id {
            return None;
        }
        match allocation.place {
            Place::Pooled(node) => {
                let region = self.tlsf.node(node).2;
                self.blocks.get(region as usize)?.as_ref().map(|p| &p.block)
            }
            Place::Dedicated(slot) => self.dedicated.block(slot),
        }
    }

    /// Current counters.
    pub fn stats(&self) -> Stats {
        let mut stats = self.stats;
        stats.dedicated_bytes = self.dedicated.bytes();
        stats.pending_bytes = self.pending.bytes();
        stats.largest_free_range = self.tlsf.largest_free().max(self.dedicated.largest_idle());
        stats.fragmentation =
            Stats::fragmentation_of(stats.peak_bytes_reserved, stats.peak_bytes_in_use);
        if let Some(vm) = &self.vm {
            let c = vm.counters();
            stats.physical_creates = c.creates;
            stats.physical_releases = c.releases;
            stats.map_calls = c.map_calls;
            stats.unmap_calls = c.unmap_calls;
            stats.granules_mapped = c.granules_mapped;
            stats.granules_unmapped = c.granules_unmapped;
            stats.bytes_mapped = c.mapped_bytes;
            stats.peak_bytes_mapped = c.peak_mapped_bytes;
        }
        stats
    }

    fn check_owner(&self, allocation: &Allocation) -> Result<(), MemError> {
        let known = match allocation.place {
            Place::Pooled(_) => true,
            Place::Dedicated(slot) => self.dedicated.is_in_use(slot),
        };
        if allocation.owner == self.id && known {
            Ok(())
        } else {
            Err(MemError::ForeignAllocation {
                addr: allocation.addr,
            })
        }
    }

    fn alloc_inner(
        &mut self,
        size: usize,
        align: usize,
        stream: Option<StreamId>,
    ) -> Result<Allocation, MemError> {
        check_align(align)?;
        let align = align.max(UNIT);
        let rounded = round_size(size.max(1), UNIT)?;
        let (place, addr) = if rounded > self.dedicated_threshold() {
            let (slot, addr) = self.alloc_dedicated(size, rounded, align, stream)?;
            (Place::Dedicated(slot), addr)
        } else if self.vm.is_some() {
            let node = self.alloc_expandable(size, rounded, align, stream)?;
            (Place::Pooled(node), self.tlsf.node(node).0)
        } else {
            let node = self.alloc_pooled(size, rounded, align, stream)?;
            (Place::Pooled(node), self.tlsf.node(node).0)
        };
        Ok(self.finish(size, addr, place))
    }

    fn finish(&mut self, size: usize, addr: usize, place: Place) -> Allocation {
        self.stats.on_alloc(size);
        if let Place::Pooled(node) = place {
            let region = self.tlsf.node(node).2;
            if let Some(pos) = self.empty.iter().position(|&r| r == region) {
                self.empty.swap_remove(pos);
            }
        }
        Allocation {
            addr,
            size,
            place,
            owner: self.id,
        }
    }

    fn alloc_pooled(
        &mut self,
        size: usize,
        rounded: usize,
        align: usize,
        stream: Option<StreamId>,
    ) -> Result<NodeId, MemError> {
        if let Some(stream) = stream {
            if let Some(node) = self
                .pending
                .take_fit(&mut self.tlsf, stream, rounded, align)
            {
                return Ok(node);
            }
        }
        if let Some(node) = self.tlsf.alloc(rounded, align) {
            return Ok(node);
        }
        if !self.pending.is_empty() {
            self.process_completions();
            if let Some(node) = self.tlsf.alloc(rounded, align) {
                return Ok(node);
            }
        }
        for attempt in 0..2 {
            match self.add_memory(rounded, align) {
                Ok(region) => {
                    if let Some(node) = self.tlsf.alloc_at_tail(region, rounded, align) {
                        return Ok(node);
                    }
                }
                Err(_) if attempt == 0 => {
                    self.trim();
                    if let Some(node) = self.tlsf.alloc(rounded, align) {
                        return Ok(node);
                    }
                }
                Err(_) => {}
            }
        }
        Err(self.out_of_memory(size))
    }

    fn alloc_expandable(
        &mut self,
        size: usize,
        rounded: usize,
        align: usize,
        stream: Option<StreamId>,
    ) -> Result<NodeId, MemError> {
        if let Some(stream) = stream {
            if let Some(node) = self
                .pending
                .take_fit(&mut self.tlsf, stream, rounded, align)
            {
                return Ok(node);
            }
        }
        for attempt in 0..2 {
            match self.place_and_map(rounded, align) {
                Ok(node) => return Ok(node),
                Err(MemError::SizeOverflow { .. }) => break,
                Err(_) if attempt == 0 => {
                    self.trim();
                }
                Err(_) => {}
            }
        }
        Err(self.out_of_memory(size))
    }

    /// Places a range in a segment (reserving a new one if none has room) and maps its granules.
    /// On failure the range is freed again and nothing stays needed.
    fn place_and_map(&mut self, rounded: usize, align: usize) -> Result<NodeId, MemError> {
        let mut node = self.tlsf.alloc(rounded, align);
        if node.is_none() && !self.pending.is_empty() {
            self.process_completions();
            node = self.tlsf.alloc(rounded, align);
        }
        let node = match node {
            Some(node) => node,
            None => {
                let need = rounded
                    .checked_add(align - UNIT)
                    .ok_or(MemError::SizeOverflow { requested: rounded })?;
                let vm = self.vm.as_mut().expect("expandable mode");
                let range = vm.reserve(self.provider.as_mut(), need)?;
                self.stats.provider_allocs += 1;
                let region = self.tlsf.add_region(range.addr, range.size / UNIT * UNIT);
                vm.insert(region, range);
                self.tlsf
                    .alloc_at_tail(region, rounded, align)
                    .expect("a fresh segment holds the request")
            }
        };
        let (addr, bytes, region) = self.tlsf.node(node);
        let vm = self.vm.as_mut().expect("expandable mode");
        let provider = self.provider.as_mut();
        if let Err(err) = vm.on_alloc(provider, &mut self.stats, region, addr, bytes) {
            let freed = self.tlsf.free_range(node);
            vm.on_free(provider, &mut self.stats, freed);
            return Err(err);
        }
        Ok(node)
    }

    fn alloc_dedicated(
        &mut self,
        size: usize,
        rounded: usize,
        align: usize,
        stream: Option<StreamId>,
    ) -> Result<(SlotId, usize), MemError> {
        if let Some(found) = self
            .dedicated
            .reuse(rounded, align, stream, self.tokens.as_ref())
        {
            return Ok(found);
        }
        // Cached blocks that did not fit would only grow the reserve: give them back first.
        for block in self.dedicated.drain_idle(self.tokens.as_ref()) {
            self.return_block(block);
        }
        for attempt in 0..2 {
            match self.provider.alloc(rounded, align, self.config.exportable) {
                Ok(block) => {
                    self.stats.provider_allocs += 1;
                    self.stats.on_reserve(block.size);
                    let addr = block.addr;
                    return Ok((self.dedicated.insert(block), addr));
                }
                Err(_) if attempt == 0 => {
                    self.trim();
                }
                Err(_) => {}
            }
        }
        Err(self.out_of_memory(size))
    }

    /// Gets room for `rounded` bytes at `align` at the end of a region: grows the block with the
    /// most free space at its end when the provider can, else adds a block. Returns the region.
    fn add_memory(&mut self, rounded: usize, align: usize) -> Result<RegionId, MemError> {
        if self.config.grow_in_place {
            let mut candidates: Vec<(usize, RegionId)> = self
                .blocks
                .iter()
                .enumerate()
                .filter_map(|(r, b)| b.as_ref().filter(|b| b.can_grow).map(|_| r as RegionId))
                .map(|r| (self.tlsf.region_tail(r).1, r))
                .collect();
            candidates.sort_by(|a, b| b.cmp(a));
            for (_, region) in candidates {
                // A failed growth still lets a new block be tried below.
                if let Ok(true) = self.try_grow(region, rounded, align) {
                    return Ok(region);
                }
            }
        }
        let need = round_size(rounded.saturating_add(align - UNIT), self.config.granule)?;
        let size = need.max(self.config.block_size);
        let block = self
            .provider
            .alloc(size, align.max(4096), self.config.exportable)?;
        self.stats.provider_allocs += 1;
        self.stats.on_reserve(block.size);
        let usable = block.size / UNIT * UNIT;
        let region = self.tlsf.add_region(block.addr, usable);
        if self.blocks.len() <= region as usize {
            self.blocks.resize_with(region as usize + 1, || None);
        }
        self.blocks[region as usize] = Some(PoolBlock {
            block,
            can_grow: self.config.grow_in_place,
        });
        Ok(region)
    }

    fn try_grow(
        &mut self,
        region: RegionId,
        rounded: usize,
        align: usize,
    ) -> Result<bool, MemError> {
        let (tail_start, _) = self.tlsf.region_tail(region);
        let Some(pool) = self.blocks[region as usize].as_mut() else {
            return Ok(false);
        };
        let start = crate::align::align_up(tail_start, align)
            .ok_or(MemError::SizeOverflow { requested: rounded })?;
        let end = start
            .checked_add(rounded)
            .ok_or(MemError::SizeOverflow { requested: rounded })?;
        let new_size = round_size(end - pool.block.addr, self.config.granule)?;
        let old_size = pool.block.size;
        if !self.provider.grow(&mut pool.block, new_size)? {
            pool.can_grow = false;
            return Ok(false);
        }
        let grown = pool.block.size;
        self.stats.provider_grows += 1;
        self.stats.on_reserve(grown - old_size);
        self.tlsf.grow_region(region, grown / UNIT * UNIT);
        Ok(true)
    }

    fn after_free(&mut self, region: RegionId) {
        if !self.tlsf.region_is_empty(region) || self.empty.contains(&region) {
            return;
        }
        self.empty.push(region);
        if self.empty.len() > self.config.keep_empty_blocks {
            // Keep the largest empty blocks: they serve the most requests.
            let (pos, _) = self
                .empty
                .iter()
                .enumerate()
                .min_by_key(|(_, &r)| self.tlsf.region_span(r).1)
                .expect("empty list is non-empty");
            let victim = self.empty.swap_remove(pos);
            self.release_region(victim);
        }
    }

    fn release_region(&mut self, region: RegionId) {
        self.tlsf.remove_region(region);
        if let Some(pool) = self.blocks[region as usize].take() {
            self.return_block(pool.block);
        }
    }

    fn return_block(&mut self, block: Block) {
        self.stats.on_release(block.size);
        self.provider.free(block);
    }

    fn out_of_memory(&self, requested: usize) -> MemError {
        MemError::OutOfMemory {
            device: self.provider.name().to_string(),
            requested,
            in_use: self.stats.bytes_in_use,
            reserved: self.stats.bytes_reserved,
            capacity: self.provider.capacity(),
        }
    }
}

impl Drop for SubAllocator {
    /// Returns every block to the provider, whether or not allocations are still live.
    fn drop(&mut self) {
        if let Some(vm) = self.vm.as_mut() {
            vm.release_all(self.provider.as_mut());
        }
        for pool in self.blocks.drain(..).flatten() {
            self.provider.free(pool.block);
        }
        for block in self.dedicated.drain_all() {
            self.provider.free(block);
        }
    }
}

#[cfg(test)]
mod tests;
