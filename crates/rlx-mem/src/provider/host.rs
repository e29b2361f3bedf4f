//! Host memory provider: aligned blocks from `std::alloc`, or on Linux growable blocks carved
//! from a virtual-memory reservation (like CUDA VMM), committed page range by page range.
//!
//! On Linux it also implements the virtual-memory calls: a range is an `mmap(PROT_NONE,
//! MAP_NORESERVE)` reservation, mapping a granule makes it readable and writable (`mprotect`;
//! the kernel backs it on first touch), unmapping gives the pages back (`madvise(MADV_DONTNEED)`
//! then `mprotect(PROT_NONE)`). A host "physical granule" is a capacity token: the kernel, not
//! the handle, owns the pages, so a remapped granule reads as zeros.

use std::alloc::Layout;

use super::{Block, BlockProvider, PhysicalGranule, ProviderStats, VirtualRange};
use crate::align::{align_up, check_align};
use crate::MemError;

/// Virtual bytes reserved per growable block; only committed pages cost memory. A block that
/// outgrows its window makes the pool add a new block instead.
const DEFAULT_WINDOW: usize = 16 << 30;

/// Granule of the virtual-memory calls unless set otherwise (CUDA's usual VMM granularity).
const DEFAULT_GRANULE: usize = 2 << 20;

/// Provides host RAM. Blocks from the reservation path can grow in place, so a pool over this
/// provider keeps one contiguous range as it grows.
#[derive(Debug)]
pub struct HostProvider {
    stats: ProviderStats,
    capacity: Option<usize>,
    growable: bool,
    window: usize,
    granule: usize,
    next_physical: u64,
}

impl HostProvider {
    /// Host memory, growable where the platform supports reservations (Linux).
    pub fn new() -> Self {
        HostProvider {
            stats: ProviderStats::default(),
            capacity: None,
            growable: vm::SUPPORTED,
            window: DEFAULT_WINDOW,
            granule: DEFAULT_GRANULE,
            next_physical: 1,
        }
    }

    /// Sets the granule of the virtual-memory calls (rounded up to a power of two, at least a page).
    pub fn with_granule(mut self, bytes: usize) -> Self {
        self.granule = bytes.max(vm::page_size()).next_power_of_two();
        self
    }

    /// Host memory from `std::alloc` only; blocks never grow.
    pub fn without_growth() -> Self {
        HostProvider {
            growable: false,
            ..Self::new()
        }
    }

    /// Sets how far one block may grow in place (virtual address space reserved per block).
    pub fn with_growth_window(mut self, bytes: usize) -> Self {
        self.window = bytes;
        self
    }

    /// Refuses to hold more than `bytes` at once.
    pub fn with_capacity(mut self, bytes: usize) -> Self {
        self.capacity = Some(bytes);
        self
    }

    fn refuse(&self, requested: usize, reason: String) -> MemError {
        MemError::ProviderFailed {
            device: "host".to_string(),
            requested,
            reason,
        }
    }

    fn check_room(&self, extra: usize) -> Result<(), MemError> {
        match self.capacity {
            Some(cap) if self.stats.live_bytes.saturating_add(extra) > cap => {
                Err(self.refuse(extra, format!("capacity {cap} bytes exceeded")))
            }
            _ => Ok(()),
        }
    }
}

impl Default for HostProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockProvider for HostProvider {
    fn name(&self) -> &str {
        "host"
    }

    fn alloc(&mut self, size: usize, align: usize, exportable: bool) -> Result<Block, MemError> {
        check_align(align)?;
        if size == 0 {
            return Err(self.refuse(0, "zero-sized block".to_string()));
        }
        self.check_room(size)?;
        let (addr, handle) = if self.growable && align <= vm::page_size() {
            let window = self.window.max(size);
            let addr = vm::reserve(window, size).map_err(|reason| self.refuse(size, reason))?;
            (addr, window as u64)
        } else {
            let layout = Layout::from_size_align(size, align)
                .map_err(|err| self.refuse(size, err.to_string()))?;
            // SAFETY: `layout` has a non-zero size, checked above.
            let ptr = unsafe { std::alloc::alloc(layout) };
            if ptr.is_null() {
                return Err(self.refuse(size, "the system allocator returned null".to_string()));
            }
            (ptr as usize, 0)
        };
        self.stats.on_alloc(size);
        Ok(Block {
            addr,
            size,
            align,
            exportable,
            handle,
        })
    }

    fn free(&mut self, block: Block) {
        self.stats.on_free(block.size);
        if block.handle == 0 {
            // SAFETY: handle 0 marks a block from `std::alloc` with this exact layout; such
            // blocks never grow, so `size` is the size it was allocated with.
            unsafe {
                let layout = Layout::from_size_align_unchecked(block.size, block.align);
                std::alloc::dealloc(block.addr as *mut u8, layout);
            }
        } else {
            vm::release(block.addr, block.handle as usize);
        }
    }

    fn grow(&mut self, block: &mut Block, new_size: usize) -> Result<bool, MemError> {
        if block.handle == 0 || new_size > block.handle as usize {
            return Ok(false);
        }
        if new_size <= block.size {
            return Ok(true);
        }
        let extra = new_size - block.size;
        self.check_room(extra)?;
        vm::commit(block.addr, block.size, new_size)
            .map_err(|reason| self.refuse(extra, reason))?;
        self.stats.on_grow(extra);
        block.size = new_size;
        Ok(true)
    }

    fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    fn stats(&self) -> ProviderStats {
        self.stats
    }

    fn granule_size(&self) -> Option<usize> {
        vm::SUPPORTED.then_some(self.granule)
    }

    fn reserve_virtual(&mut self, size: usize) -> Result<VirtualRange, MemError> {
        if !vm::SUPPORTED {
            return Err(super::vm_unsupported("host", size));
        }
        let size = align_up(size.max(1), self.granule)
            .ok_or_else(|| self.refuse(size, "size overflow".to_string()))?;
        let addr =
            vm::reserve_aligned(size, self.granule).map_err(|reason| self.refuse(size, reason))?;
        self.stats.vm_reserves += 1;
        Ok(VirtualRange {
            addr,
            size,
            handle: 0,
        })
    }

    fn release_virtual(&mut self, range: VirtualRange) {
        self.stats.vm_releases += 1;
        vm::release(range.addr, range.size);
    }

    fn create_physical(&mut self, size: usize) -> Result<PhysicalGranule, MemError> {
        if !vm::SUPPORTED {
            return Err(super::vm_unsupported("host", size));
        }
        if size == 0 || size % self.granule != 0 {
            let reason = format!(
                "physical size not a multiple of the granule {}",
                self.granule
            );
            return Err(self.refuse(size, reason));
        }
        self.check_room(size)?;
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
        range: &VirtualRange,
        offset: usize,
        granules: &[PhysicalGranule],
    ) -> Result<(), MemError> {
        let bytes: usize = granules.iter().map(|g| g.size).sum();
        if offset % self.granule != 0 || offset + bytes > range.size {
            return Err(self.refuse(bytes, format!("map outside the range at offset {offset}")));
        }
        vm::protect(range.addr + offset, bytes, true)
            .map_err(|reason| self.refuse(bytes, reason))?;
        self.stats.on_map(bytes / self.granule, bytes);
        Ok(())
    }

    fn unmap(&mut self, range: &VirtualRange, offset: usize, size: usize) {
        vm::decommit(range.addr + offset, size);
        self.stats.on_unmap(size / self.granule, size);
    }
}

/// Virtual-memory reservations through `mmap`/`mprotect`.
#[cfg(target_os = "linux")]
mod vm {
    use super::align_up;

    pub const SUPPORTED: bool = true;

    pub fn page_size() -> usize {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            page as usize
        } else {
            4096
        }
    }

    fn os_error(what: &str) -> String {
        format!("{what} failed: {}", std::io::Error::last_os_error())
    }

    /// Reserves `window` bytes of address space and commits the first `size`.
    pub fn reserve(window: usize, size: usize) -> Result<usize, String> {
        // SAFETY: an anonymous PROT_NONE mapping touches no existing memory.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                window,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(os_error("mmap reservation"));
        }
        let addr = ptr as usize;
        if let Err(reason) = commit(addr, 0, size) {
            release(addr, window);
            return Err(reason);
        }
        Ok(addr)
    }

    /// Makes bytes `[old_size, new_size)` of a reservation readable and writable.
    pub fn commit(addr: usize, old_size: usize, new_size: usize) -> Result<(), String> {
        let page = page_size();
        let start = align_up(old_size, page).ok_or("commit overflow")?;
        let end = align_up(new_size, page).ok_or("commit overflow")?;
        if end <= start {
            return Ok(());
        }
        // SAFETY: the range lies inside a reservation this provider mapped.
        let rc = unsafe {
            libc::mprotect(
                (addr + start) as *mut libc::c_void,
                end - start,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            return Err(os_error("mprotect commit"));
        }
        Ok(())
    }

    /// Returns a whole reservation to the system.
    pub fn release(addr: usize, window: usize) {
        // SAFETY: `addr..addr + window` is a mapping made by `reserve` or `reserve_aligned`.
        unsafe {
            libc::munmap(addr as *mut libc::c_void, window);
        }
    }

    /// Reserves `size` bytes of address space aligned to `align` (a power of two), nothing
    /// accessible: over-reserves by `align` and unmaps the unaligned ends.
    pub fn reserve_aligned(size: usize, align: usize) -> Result<usize, String> {
        let align = align.max(page_size());
        let total = size.checked_add(align).ok_or("reservation overflow")?;
        // SAFETY: an anonymous PROT_NONE mapping touches no existing memory.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(os_error("mmap reservation"));
        }
        let base = ptr as usize;
        let addr = align_up(base, align).ok_or("reservation overflow")?;
        let tail = base + total - (addr + size);
        // SAFETY: both pieces lie inside the mapping just made and outside `addr..addr + size`.
        unsafe {
            if addr > base {
                libc::munmap(base as *mut libc::c_void, addr - base);
            }
            if tail > 0 {
                libc::munmap((addr + size) as *mut libc::c_void, tail);
            }
        }
        Ok(addr)
    }

    /// Makes `[addr, addr + len)` of a reservation readable and writable, or inaccessible.
    pub fn protect(addr: usize, len: usize, writable: bool) -> Result<(), String> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_NONE
        };
        // SAFETY: the range lies inside a reservation this provider mapped.
        if unsafe { libc::mprotect(addr as *mut libc::c_void, len, prot) } != 0 {
            return Err(os_error("mprotect"));
        }
        Ok(())
    }

    /// Gives the pages of `[addr, addr + len)` back to the system and makes the range inaccessible.
    pub fn decommit(addr: usize, len: usize) {
        // SAFETY: the range lies inside a reservation this provider mapped; its contents are
        // dead (every allocation in it was freed).
        unsafe {
            libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED);
        }
        // Failing to drop the permission only leaves the (empty) pages accessible.
        let _ = protect(addr, len, false);
    }
}

/// Platforms without reservations: blocks come from `std::alloc` and never grow.
#[cfg(not(target_os = "linux"))]
mod vm {
    pub const SUPPORTED: bool = false;

    pub fn page_size() -> usize {
        4096
    }

    pub fn reserve(_window: usize, _size: usize) -> Result<usize, String> {
        Err("virtual-memory reservations are not supported here".to_string())
    }

    pub fn commit(_addr: usize, _old: usize, _new: usize) -> Result<(), String> {
        Err("virtual-memory reservations are not supported here".to_string())
    }

    pub fn release(_addr: usize, _window: usize) {}

    pub fn reserve_aligned(_size: usize, _align: usize) -> Result<usize, String> {
        Err("virtual-memory reservations are not supported here".to_string())
    }

    pub fn protect(_addr: usize, _len: usize, _writable: bool) -> Result<(), String> {
        Err("virtual-memory reservations are not supported here".to_string())
    }

    pub fn decommit(_addr: usize, _len: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pattern(block: &Block, seed: u8) {
        // SAFETY: the provider handed out `size` writable bytes at `addr`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(block.addr as *mut u8, block.size) };
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = seed.wrapping_add(i as u8);
        }
        assert_eq!(
            bytes[block.size - 1],
            seed.wrapping_add((block.size - 1) as u8)
        );
    }

    #[test]
    fn blocks_are_aligned_writable_and_returned() {
        for mut provider in [HostProvider::new(), HostProvider::without_growth()] {
            let mut blocks = Vec::new();
            for step in 0..12usize {
                let size = 1 + step * 37_171 + (step % 3) * 65_536;
                let align = 1 << (4 + step % 12);
                let block = provider.alloc(size, align, step % 2 == 0).unwrap();
                assert_eq!(block.addr % align, 0);
                write_pattern(&block, step as u8);
                blocks.push(block);
            }
            for block in blocks.drain(..) {
                provider.free(block);
            }
            assert_eq!(provider.stats().live_bytes, 0);
            assert_eq!(provider.stats().frees, 12);
            assert!(provider.alloc(0, 16, false).is_err());
            assert!(provider.alloc(64, 48, false).is_err());
        }
    }

    #[test]
    fn growth_keeps_the_address_and_data() {
        let mut provider = HostProvider::new();
        let mut block = provider.alloc(10_000, 256, false).unwrap();
        write_pattern(&block, 7);
        let addr = block.addr;
        let grew = provider.grow(&mut block, 3 << 20).unwrap();
        assert_eq!(grew, vm::SUPPORTED);
        if grew {
            assert_eq!(block.addr, addr);
            assert_eq!(block.size, 3 << 20);
            write_pattern(&block, 9);
            assert_eq!(provider.stats().grows, 1);
        }
        provider.free(block);
        assert_eq!(provider.stats().live_bytes, 0);
    }

    #[test]
    fn growth_stops_at_the_window() {
        let mut provider = HostProvider::new().with_growth_window(8 << 20);
        let mut block = provider.alloc(1 << 20, 256, false).unwrap();
        assert_eq!(provider.grow(&mut block, 6 << 20).unwrap(), vm::SUPPORTED);
        assert!(!provider.grow(&mut block, 9 << 20).unwrap());
        provider.free(block);
    }

    #[test]
    fn granules_map_writable_and_unmap() {
        let mut provider = HostProvider::new()
            .with_granule(64 << 10)
            .with_capacity(3 << 16);
        let Some(g) = provider.granule_size() else {
            assert!(
                provider.reserve_virtual(1 << 20).is_err(),
                "no virtual memory here"
            );
            return;
        };
        assert_eq!(g, 64 << 10);
        let range = provider.reserve_virtual(8 * g).unwrap();
        assert_eq!((range.addr % g, range.size), (0, 8 * g));
        assert!(
            provider.create_physical(g + 4096).is_err(),
            "not a granule multiple"
        );
        // One piece of two granules and one of one granule: the capacity is then used up.
        let granules = vec![
            provider.create_physical(2 * g).unwrap(),
            provider.create_physical(g).unwrap(),
        ];
        assert!(
            provider.create_physical(g).is_err(),
            "capacity counts physical bytes"
        );
        provider.map(&range, 2 * g, &granules[..1]).unwrap();
        provider.map(&range, 7 * g, &granules[1..]).unwrap();
        assert!(
            provider.map(&range, 8 * g, &granules[1..]).is_err(),
            "outside the range"
        );
        let mapped = Block {
            addr: range.addr + 2 * g,
            size: 2 * g,
            align: g,
            exportable: false,
            handle: 0,
        };
        write_pattern(&mapped, 3);
        provider.unmap(&range, 2 * g, 2 * g);
        // Mapped again, the pages are fresh: the old contents were given back.
        provider.map(&range, 2 * g, &granules[..1]).unwrap();
        // SAFETY: the granule was just mapped readable.
        let first = unsafe { *((range.addr + 2 * g + 5) as *const u8) };
        assert_eq!(first, 0);
        assert_eq!(provider.stats().mapped_bytes, 3 * g);
        provider.unmap(&range, 2 * g, 2 * g);
        provider.unmap(&range, 7 * g, g);
        for granule in granules {
            provider.release_physical(granule);
        }
        provider.release_virtual(range);
        let stats = provider.stats();
        assert_eq!((stats.live_bytes, stats.mapped_bytes), (0, 0));
        assert_eq!(
            (stats.map_calls, stats.unmap_calls, stats.physical_creates),
            (3, 3, 2)
        );
    }

    #[test]
    fn capacity_is_enforced() {
        let mut provider = HostProvider::new().with_capacity(1 << 20);
        let mut block = provider.alloc(600 << 10, 64, false).unwrap();
        assert!(provider.alloc(600 << 10, 64, false).is_err());
        assert!(provider.grow(&mut block, 2 << 20).is_err() || !vm::SUPPORTED);
        provider.free(block);
    }
}
