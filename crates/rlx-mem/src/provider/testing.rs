//! A provider for tests: fake addresses, a capacity cap, failure injection and call counting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::fake::FakeSpace;
use super::{Block, BlockProvider, ProviderStats};
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
}

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
}
