//! Fake address space for simulated providers: each block gets its own 1 TiB window, so it can
//! grow in place, and no byte of memory is ever touched.

use crate::align::align_up;

/// Size of the window reserved for each fake block.
const WINDOW: usize = 1 << 40;

/// Hands out non-overlapping fake address windows; never reuses an address.
#[derive(Debug)]
pub(crate) struct FakeSpace {
    next: usize,
}

impl FakeSpace {
    pub(crate) fn new() -> Self {
        FakeSpace { next: WINDOW }
    }

    /// Reserves a window for a block of `size` bytes aligned to `align`: `(addr, window bytes)`.
    pub(crate) fn reserve(&mut self, size: usize, align: usize) -> Option<(usize, usize)> {
        let window = align_up(size.max(1), WINDOW)?;
        let addr = align_up(self.next, align)?;
        self.next = addr.checked_add(window)?;
        Some((addr, window))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_never_overlap_and_are_aligned() {
        let mut space = FakeSpace::new();
        let mut last_end = 0;
        for step in 0..50usize {
            let size = (step * 7919 + 1) << (step % 30);
            let align = 1 << (step % 16);
            let (addr, window) = space.reserve(size, align).unwrap();
            assert!(addr >= last_end);
            assert_eq!(addr % align, 0);
            assert!(window >= size);
            last_end = addr + window;
        }
        assert!(space.reserve(usize::MAX - 5, 1).is_none());
    }
}
