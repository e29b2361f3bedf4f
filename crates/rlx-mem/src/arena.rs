//! Linear (bump) arena for per-run scratch: allocation is one add, and `reset` frees everything
//! at once when the run ends.

use crate::align::{align_up, check_align};
use crate::pool::Allocation;
use crate::MemError;

/// A bump allocator over `[base, base + capacity)`, typically one sub-allocation. The
/// high-water mark tells the runtime how big to make the arena next time.
#[derive(Debug, Clone)]
pub struct LinearArena {
    base: usize,
    capacity: usize,
    used: usize,
    high_water: usize,
}

impl LinearArena {
    /// An arena over the address range `[base, base + capacity)`.
    pub fn new(base: usize, capacity: usize) -> Self {
        LinearArena {
            base,
            capacity,
            used: 0,
            high_water: 0,
        }
    }

    /// An arena over the bytes of an allocation.
    pub fn over(allocation: &Allocation) -> Self {
        Self::new(allocation.addr(), allocation.size())
    }

    /// Bumps out `size` bytes aligned to `align`; returns the address.
    ///
    /// # Errors
    /// [`MemError::BadAlignment`] for a non power of two, [`MemError::ArenaFull`] when the
    /// arena has no room left before its next reset.
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<usize, MemError> {
        check_align(align)?;
        let full = || MemError::ArenaFull {
            requested: size,
            used: self.used,
            capacity: self.capacity,
        };
        let start = align_up(self.base + self.used, align).ok_or_else(full)?;
        let end = start.checked_add(size).ok_or_else(full)?;
        if end > self.base + self.capacity {
            return Err(full());
        }
        self.used = end - self.base;
        self.high_water = self.high_water.max(self.used);
        Ok(start)
    }

    /// Frees everything allocated since the last reset.
    pub fn reset(&mut self) {
        self.used = 0;
    }

    /// Bytes bumped since the last reset, padding included.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Most bytes ever used between two resets.
    pub fn high_water(&self) -> usize {
        self.high_water
    }

    /// Size of the arena.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_runs_stay_inside_and_reset() {
        let base = 0x7f00_0000_0100;
        let mut arena = LinearArena::new(base, 1 << 20);
        let mut x: u64 = 0xfeed_face_1234_5678;
        for _run in 0..20 {
            let mut spans: Vec<(usize, usize)> = Vec::new();
            loop {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let size = (x % 50_000) as usize + 1;
                let align = 1 << (x >> 60);
                match arena.alloc(size, align) {
                    Ok(addr) => {
                        assert_eq!(addr % align, 0);
                        assert!(addr >= base && addr + size <= base + (1 << 20));
                        if let Some(&(_, end)) = spans.last() {
                            assert!(addr >= end);
                        }
                        spans.push((addr, addr + size));
                    }
                    Err(MemError::ArenaFull {
                        requested,
                        used,
                        capacity,
                    }) => {
                        assert_eq!((requested, capacity), (size, 1 << 20));
                        assert!(used + size > capacity - align.min(capacity));
                        break;
                    }
                    Err(other) => panic!("unexpected {other}"),
                }
            }
            assert!(arena.high_water() >= arena.used());
            arena.reset();
            assert_eq!(arena.used(), 0);
        }
        assert!(arena.alloc(8, 3).is_err());
        assert!(arena.alloc(usize::MAX, 8).is_err());
    }
}
