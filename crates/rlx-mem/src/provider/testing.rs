//! A provider for tests: fake addresses, a capacity cap, failure injection and call counting.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::fake::FakeSpace;
use super::{Block, BlockProvider, PhysicalGranule, ProviderStats, VirtualRange};
use crate::align::check_align;
use crate::MemError;

/// Test double for a device. Clones share state, so a test keeps one clone to inspect the
/// counters after handing the other to an allocator (and after that allocator is dropped).
#[derive(Debug, Clone)]
pub struct TestProvider {
    inner: Arc<Mutex<TestState>>,
}

#[derive(Debug)]
struct TestState {
    space: FakeSpace,
    capacity: Option<usize>,
    growable: bool,
    fail_allocs: usize,
    fail_grows: usize,
    stats: ProviderStats,
    live: HashMap<usize, usize>,
    bad_frees: u64,
    vm: Option<usize>,
    fail_maps: usize,
    fail_creates: usize,
    next_handle: u64,
    /// Reserved ranges by handle: (addr, size).
    ranges: HashMap<u64, (usize, usize)>,
    /// Mapped granules by (range handle, granule index): the physical handle there.
    mapped: HashMap<(u64, usize), u64>,
    /// Live physical granules: their sizes in bytes.
    physical: HashMap<u64, usize>,
    /// Physical granules currently mapped somewhere: (range handle, first granule index).
    physical_mapped: HashMap<u64, (u64, usize)>,
    bad_vm_calls: u64,
}

/// Granule of the test provider's virtual-memory calls unless set otherwise.
const TEST_GRANULE: usize = 64 << 10;

impl TestProvider {
    /// An unbounded provider whose blocks cannot grow.
    pub fn new() -> Self {
        TestProvider {
            inner: Arc::new(Mutex::new(TestState {
                space: FakeSpace::new(),
                capacity: None,
                growable: false,
                fail_allocs: 0,
                fail_grows: 0,
                stats: ProviderStats::default(),
                live: HashMap::new(),
                bad_frees: 0,
                vm: Some(TEST_GRANULE),
                fail_maps: 0,
                fail_creates: 0,
                next_handle: 1,
                ranges: HashMap::new(),
                mapped: HashMap::new(),
                physical: HashMap::new(),
                physical_mapped: HashMap::new(),
                bad_vm_calls: 0,
            })),
        }
    }

    /// A provider that refuses to hold more than `bytes` at once.
    pub fn with_capacity(bytes: usize) -> Self {
        let provider = Self::new();
        provider.set_capacity(Some(bytes));
        provider
    }

    /// Lets blocks grow in place (as virtual-memory reservations do).
    pub fn growable(self, growable: bool) -> Self {
        self.state().growable = growable;
        self
    }

    /// Changes the capacity cap; `None` removes it.
    pub fn set_capacity(&self, bytes: Option<usize>) {
        self.state().capacity = bytes;
    }

    /// Makes the next `n` calls to `alloc` fail as if the device were full.
    pub fn fail_next_allocs(&self, n: usize) {
        self.state().fail_allocs = n;
    }

    /// Makes the next `n` calls to `grow` fail as if the device were full.
    pub fn fail_next_grows(&self, n: usize) {
        self.state().fail_grows = n;
    }

    /// Frees of blocks this provider did not hand out (or handed out with another size).
    pub fn bad_frees(&self) -> u64 {
        self.state().bad_frees
    }

    /// Sets the virtual-memory granule (a power of two); `None` turns virtual memory off.
    /// On by default with 64 KiB granules.
    pub fn with_granule(self, bytes: Option<usize>) -> Self {
        self.state().vm = bytes.map(|b| b.max(256).next_power_of_two());
        self
    }

    /// Makes the next `n` calls to `map` fail as if the device were full.
    pub fn fail_next_maps(&self, n: usize) {
        self.state().fail_maps = n;
    }

    /// Makes the next `n` calls to `create_physical` fail as if the device were full.
    pub fn fail_next_creates(&self, n: usize) {
        self.state().fail_creates = n;
    }

    /// Injected failures not yet used up (allocs, grows, maps and creations together).
    pub fn pending_failures(&self) -> usize {
        let state = self.state();
        state.fail_allocs + state.fail_grows + state.fail_maps + state.fail_creates
    }

    /// Virtual-memory calls that broke the rules: mapping over a mapped granule or outside the
    /// range, mapping a granule twice, mapping physical memory of a power-of-two size at an
    /// offset that is not a multiple of that size (stricter than CUDA, which only asks for the
    /// granule: the allocator promises it), unmapping what is not mapped or only part of a
    /// mapped physical granule, releasing a mapped granule or a range that still has mappings,
    /// unknown handles or sizes.
    pub fn bad_vm_calls(&self) -> u64 {
        self.state().bad_vm_calls
    }

    /// Granules (of the provider's granule size) mapped right now, over all ranges.
    pub fn mapped_granules(&self) -> usize {
        self.state().mapped.len()
    }

    /// Whether `[addr, addr + size)` lies entirely in mapped granules of reserved ranges.
    pub fn is_mapped(&self, addr: usize, size: usize) -> bool {
        let state = self.state();
        let Some(granule) = state.vm else {
            return false;
        };
        let Some((&handle, &(base, _))) = state
            .ranges
            .iter()
            .find(|(_, &(base, len))| addr >= base && addr + size <= base + len)
        else {
            return false;
        };
        let first = (addr - base) / granule;
        let last = (addr + size.max(1) - 1 - base) / granule;
        (first..=last).all(|g| state.mapped.contains_key(&(handle, g)))
    }

    fn state(&self) -> MutexGuard<'_, TestState> {
        // A panicking test thread must not hide the counters from the others.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Default for TestProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl TestState {
    fn refuse(&self, requested: usize, reason: &str) -> MemError {
        MemError::ProviderFailed {
            device: "test".to_string(),
            requested,
            reason: reason.to_string(),
        }
    }

    fn check_room(&self, extra: usize) -> Result<(), MemError> {
        if let Some(cap) = self.capacity {
            if self.stats.live_bytes.saturating_add(extra) > cap {
                let reason = format!("capacity {cap} bytes exceeded");
                return Err(self.refuse(extra, &reason));
            }
        }
        Ok(())
    }
}

impl BlockProvider for TestProvider {
    fn name(&self) -> &str {
        "test"
    }

    fn alloc(&mut self, size: usize, align: usize, exportable: bool) -> Result<Block, MemError> {
        check_align(align)?;
        let mut state = self.state();
        if state.fail_allocs > 0 {
            state.fail_allocs -= 1;
            return Err(state.refuse(size, "injected failure"));
        }
        state.check_room(size)?;
        let (addr, window) = state
            .space
            .reserve(size, align)
            .ok_or_else(|| state.refuse(size, "fake address space exhausted"))?;
        state.stats.on_alloc(size);
        state.live.insert(addr, size);
        Ok(Block {
            addr,
            size,
            align,
            exportable,
            handle: window as u64,
        })
    }

    fn free(&mut self, block: Block) {
        let mut state = self.state();
        match state.live.remove(&block.addr) {
            Some(size) if size == block.size => state.stats.on_free(size),
            Some(size) => {
                state.bad_frees += 1;
                state.stats.on_free(size);
            }
            None => state.bad_frees += 1,
        }
    }

    fn grow(&mut self, block: &mut Block, new_size: usize) -> Result<bool, MemError> {
        let mut state = self.state();
        if !state.growable || new_size > block.handle as usize {
            return Ok(false);
        }
        if new_size <= block.size {
            return Ok(true);
        }
        let extra = new_size - block.size;
        if state.fail_grows > 0 {
            state.fail_grows -= 1;
            return Err(state.refuse(extra, "injected failure"));
        }
        state.check_room(extra)?;
        state.stats.on_grow(extra);
        state.live.insert(block.addr, new_size);
        block.size = new_size;
        Ok(true)
    }

    fn capacity(&self) -> Option<usize> {
        self.state().capacity
    }

    fn stats(&self) -> ProviderStats {
        self.state().stats
    }

    fn granule_size(&self) -> Option<usize> {
        self.state().vm
    }

    fn reserve_virtual(&mut self, size: usize) -> Result<VirtualRange, MemError> {
        let mut state = self.state();
        let Some(granule) = state.vm else {
            return Err(super::vm_unsupported("test", size));
        };
        if state.fail_allocs > 0 {
            state.fail_allocs -= 1;
            return Err(state.refuse(size, "injected failure"));
        }
        let size = crate::align::align_up(size.max(1), granule)
            .ok_or_else(|| state.refuse(size, "size overflow"))?;
        let (addr, _) = state
            .space
            .reserve(size, granule)
            .ok_or_else(|| state.refuse(size, "fake address space exhausted"))?;
        let handle = state.next_handle;
        state.next_handle += 1;
        state.ranges.insert(handle, (addr, size));
        state.stats.vm_reserves += 1;
        Ok(VirtualRange { addr, size, handle })
    }

    fn release_virtual(&mut self, range: VirtualRange) {
        let mut state = self.state();
        let known = state.ranges.remove(&range.handle) == Some((range.addr, range.size));
        let still_mapped = state.mapped.keys().any(|&(h, _)| h == range.handle);
        if !known || still_mapped {
            state.bad_vm_calls += 1;
        }
        state.stats.vm_releases += 1;
    }

    fn create_physical(&mut self, size: usize) -> Result<PhysicalGranule, MemError> {
        let mut state = self.state();
        let Some(granule) = state.vm else {
            return Err(super::vm_unsupported("test", size));
        };
        if size == 0 || size % granule != 0 {
            return Err(state.refuse(size, "physical size not a multiple of the granule"));
        }
        if state.fail_creates > 0 {
            state.fail_creates -= 1;
            return Err(state.refuse(size, "injected failure"));
        }
        state.check_room(size)?;
        let handle = state.next_handle;
        state.next_handle += 1;
        state.physical.insert(handle, size);
        state.stats.on_create(size);
        Ok(PhysicalGranule { handle, size })
    }

    fn release_physical(&mut self, granule: PhysicalGranule) {
        let mut state = self.state();
        if state.physical.get(&granule.handle) != Some(&granule.size)
            || state.physical_mapped.contains_key(&granule.handle)
        {
            state.bad_vm_calls += 1;
            return;
        }
        state.physical.remove(&granule.handle);
        state.stats.on_release_physical(granule.size);
    }

    fn map(
        &mut self,
        range: &VirtualRange,
        offset: usize,
        granules: &[PhysicalGranule],
    ) -> Result<(), MemError> {
        let mut state = self.state();
        let Some(unit) = state.vm else {
            return Err(super::vm_unsupported("test", 0));
        };
        let bytes: usize = granules.iter().map(|g| g.size).sum();
        if state.fail_maps > 0 {
            state.fail_maps -= 1;
            return Err(state.refuse(bytes, "injected map failure"));
        }
        let mut valid = offset % unit == 0
            && !granules.is_empty()
            && state.ranges.get(&range.handle) == Some(&(range.addr, range.size))
            && offset + bytes <= range.size
            && granules.iter().collect::<HashSet<_>>().len() == granules.len();
        let mut at = offset;
        for g in granules {
            valid = valid
                && state.physical.get(&g.handle) == Some(&g.size)
                && !state.physical_mapped.contains_key(&g.handle)
                && (!g.size.is_power_of_two() || at % g.size == 0)
                && (at / unit..(at + g.size) / unit)
                    .all(|i| !state.mapped.contains_key(&(range.handle, i)));
            at += g.size;
        }
        if !valid {
            state.bad_vm_calls += 1;
            return Err(state.refuse(bytes, "invalid map call"));
        }
        let mut at = offset;
        for g in granules {
            for i in at / unit..(at + g.size) / unit {
                state.mapped.insert((range.handle, i), g.handle);
            }
            state
                .physical_mapped
                .insert(g.handle, (range.handle, at / unit));
            at += g.size;
        }
        state.stats.on_map(bytes / unit, bytes);
        Ok(())
    }

    fn unmap(&mut self, range: &VirtualRange, offset: usize, size: usize) {
        let mut state = self.state();
        let Some(unit) = state.vm else {
            state.bad_vm_calls += 1;
            return;
        };
        let mut bad = offset % unit != 0 || size == 0 || size % unit != 0;
        let (first, end) = (offset / unit, (offset + size) / unit);
        let mut i = first;
        let mut removed = 0;
        while !bad && i < end {
            // Each physical piece must start here and end inside the unmapped bytes.
            let Some(&handle) = state.mapped.get(&(range.handle, i)) else {
                bad = true;
                break;
            };
            let pieces = state.physical[&handle] / unit;
            if state.physical_mapped.get(&handle) != Some(&(range.handle, i)) || i + pieces > end {
                bad = true;
                break;
            }
            for k in i..i + pieces {
                state.mapped.remove(&(range.handle, k));
            }
            state.physical_mapped.remove(&handle);
            removed += pieces * unit;
            i += pieces;
        }
        if bad || removed != size {
            state.bad_vm_calls += 1;
        }
        state.stats.on_unmap(removed / unit, removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_injection_and_counts() {
        let probe = TestProvider::with_capacity(10 << 20).growable(true);
        let mut provider = probe.clone();
        let mut a = provider.alloc(3 << 20, 256, false).unwrap();
        let b = provider.alloc(5 << 20, 4096, true).unwrap();
        assert!(b.exportable);
        assert!(provider.alloc(3 << 20, 256, false).is_err(), "cap exceeded");
        probe.fail_next_allocs(1);
        assert!(provider.alloc(1 << 20, 256, false).is_err(), "injected");
        assert!(provider.alloc(1 << 20, 256, false).is_ok_and(|c| {
            provider.free(c);
            true
        }));
        assert!(provider.grow(&mut a, (4 << 20) + 777).unwrap());
        assert!(provider.grow(&mut a, 6 << 20).is_err(), "grow past cap");
        probe.fail_next_grows(1);
        assert!(provider.grow(&mut a, (4 << 20) + 1000).is_err());
        let stats = probe.stats();
        assert_eq!(stats.live_bytes, (9 << 20) + 777);
        assert_eq!((stats.allocs, stats.grows), (3, 1));
        provider.free(a);
        provider.free(b);
        let fake = Block {
            addr: 12,
            size: 1,
            align: 1,
            exportable: false,
            handle: 0,
        };
        provider.free(fake);
        assert_eq!(probe.bad_frees(), 1);
        assert_eq!(probe.stats().live_bytes, 0);
        assert_eq!(probe.stats().live_blocks, 0);
    }

    #[test]
    fn virtual_memory_cap_injection_and_rule_checks() {
        let probe = TestProvider::with_capacity(3 << 16).with_granule(Some(1 << 16));
        let mut provider = probe.clone();
        let g = provider.granule_size().unwrap();
        let range = provider.reserve_virtual(10 * g).unwrap();
        let a = provider.create_physical(g).unwrap();
        let b = provider.create_physical(g).unwrap();
        probe.fail_next_creates(1);
        assert!(provider.create_physical(g).is_err(), "injected");
        assert!(
            provider.create_physical(g / 2).is_err(),
            "not a granule multiple"
        );
        let c = provider.create_physical(g).unwrap();
        assert!(provider.create_physical(g).is_err(), "capacity reached");
        assert_eq!(probe.stats().live_bytes, 3 * g);
        probe.fail_next_maps(1);
        assert!(provider.map(&range, 0, &[a, b]).is_err(), "injected");
        assert_eq!(probe.mapped_granules(), 0);
        provider.map(&range, 4 * g, &[a, b]).unwrap();
        assert!(probe.is_mapped(range.addr + 4 * g + 7, 2 * g - 7));
        assert!(!probe.is_mapped(range.addr + 4 * g, 2 * g + 1));
        assert_eq!(probe.bad_vm_calls(), 0);
        // Mapping over a mapped granule, or a granule already mapped, is refused and counted.
        assert!(provider.map(&range, 5 * g, &[c]).is_err());
        assert!(provider.map(&range, 0, &[a]).is_err());
        assert_eq!(probe.bad_vm_calls(), 2);
        provider.map(&range, 9 * g, &[c]).unwrap();
        provider.unmap(&range, 4 * g, 2 * g);
        provider.unmap(&range, 9 * g, g);
        assert_eq!(probe.stats().mapped_bytes, 0);
        for granule in [a, b, c] {
            provider.release_physical(granule);
        }
        assert_eq!(probe.bad_vm_calls(), 2);
        // Physical memory of several granules: mapped at a multiple of its size, unmapped whole.
        probe.set_capacity(None);
        let big = provider.create_physical(4 * g).unwrap();
        assert!(provider.map(&range, 2 * g, &[big]).is_err(), "misaligned");
        assert_eq!(probe.bad_vm_calls(), 3);
        let small = provider.create_physical(g).unwrap();
        provider.map(&range, 3 * g, &[small, big]).unwrap();
        assert!(probe.is_mapped(range.addr + 3 * g, 5 * g));
        assert_eq!(probe.mapped_granules(), 5);
        provider.unmap(&range, 5 * g, g);
        assert_eq!(probe.bad_vm_calls(), 4, "part of a piece");
        provider.unmap(&range, 3 * g, 5 * g);
        assert_eq!(probe.mapped_granules(), 0);
        provider.release_physical(PhysicalGranule {
            handle: big.handle,
            size: g,
        });
        assert_eq!(probe.bad_vm_calls(), 5, "wrong size");
        provider.release_physical(big);
        provider.release_physical(small);
        provider.release_virtual(range);
        assert_eq!(probe.bad_vm_calls(), 5);
        let stats = probe.stats();
        assert_eq!(
            (stats.live_bytes, stats.map_calls, stats.unmap_calls),
            (0, 3, 4)
        );
        // Without virtual memory every call is refused.
        let mut plain = TestProvider::new().with_granule(None);
        assert!(plain.granule_size().is_none());
        assert!(plain.reserve_virtual(1 << 20).is_err());
        assert!(plain.create_physical(1 << 20).is_err());
    }
}
