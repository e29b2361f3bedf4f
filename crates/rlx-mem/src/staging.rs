//! Staging ring for host<->device copies: slots are carved in order, wrapping around, and
//! recycled once the completion token of their copy says it finished.

use std::collections::VecDeque;

use crate::align::{align_up, check_align};
use crate::stream::{CompletionToken, TokenSource};
use crate::MemError;

/// A slot of the ring: write the data at `addr`, queue the copy, then `submit` its token.
#[derive(Debug, PartialEq, Eq)]
pub struct StagingSlot {
    /// Address of the first byte.
    pub addr: usize,
    /// Bytes asked for.
    pub size: usize,
    seq: u64,
}

#[derive(Debug)]
struct InFlight {
    start: usize,
    end: usize,
    seq: u64,
    token: Option<CompletionToken>,
}

/// A wrap-around allocator over `[base, base + capacity)`. Slots retire in order, so a slot
/// never submitted holds back the ones after it.
#[derive(Debug)]
pub struct StagingRing {
    base: usize,
    capacity: usize,
    head: usize,
    in_flight: VecDeque<InFlight>,
    in_flight_bytes: usize,
    next_seq: u64,
}

impl StagingRing {
    /// A ring over the address range `[base, base + capacity)`.
    pub fn new(base: usize, capacity: usize) -> Self {
        StagingRing {
            base,
            capacity,
            head: 0,
            in_flight: VecDeque::new(),
            in_flight_bytes: 0,
            next_seq: 0,
        }
    }

    /// Carves a slot of `size` bytes aligned to `align`, first recycling slots whose copies
    /// completed according to `tokens`.
    ///
    /// # Errors
    /// [`MemError::BadAlignment`], and [`MemError::StagingFull`] while in-flight copies hold
    /// the room (wait for one to complete and retry).
    pub fn alloc(
        &mut self,
        size: usize,
        align: usize,
        tokens: &dyn TokenSource,
    ) -> Result<StagingSlot, MemError> {
        check_align(align)?;
        self.retire(tokens);
        let len = size.max(1);
        let start = self.find_room(len, align).ok_or(MemError::StagingFull {
            requested: size,
            in_flight: self.in_flight_bytes,
            capacity: self.capacity,
        })?;
        let seq = self.next_seq;
        self.next_seq += 1;
        let end = start + len;
        // Bytes skipped at the end of the ring when wrapping belong to this slot until it retires.
        let held_from = if start < self.head { self.head } else { start };
        let held = if start < self.head {
            self.capacity - self.head + end
        } else {
            end - start
        };
        self.in_flight.push_back(InFlight {
            start: held_from,
            end,
            seq,
            token: None,
        });
        self.in_flight_bytes += held;
        self.head = end;
        Ok(StagingSlot {
            addr: self.base + start,
            size,
            seq,
        })
    }

    /// Records the token after which the slot's copy is complete.
    ///
    /// # Errors
    /// [`MemError::UnknownStagingSlot`] when the slot is not in flight here or already submitted.
    pub fn submit(&mut self, slot: StagingSlot, token: CompletionToken) -> Result<(), MemError> {
        let entry = self
            .in_flight
            .iter_mut()
            .rev()
            .find(|e| e.seq == slot.seq && e.token.is_none())
            .ok_or(MemError::UnknownStagingSlot { seq: slot.seq })?;
        entry.token = Some(token);
        Ok(())
    }

    /// Recycles the oldest slots whose copies completed.
    pub fn retire(&mut self, tokens: &dyn TokenSource) {
        while let Some(front) = self.in_flight.front() {
            match front.token {
                Some(token) if tokens.is_complete(token) => {
                    let held = if front.end > front.start {
                        front.end - front.start
                    } else {
                        self.capacity - front.start + front.end
                    };
                    self.in_flight_bytes -= held;
                    self.in_flight.pop_front();
                }
                _ => break,
            }
        }
        if self.in_flight.is_empty() {
            self.head = 0;
        }
    }

    /// Bytes held by slots not yet retired.
    pub fn in_flight_bytes(&self) -> usize {
        self.in_flight_bytes
    }

    /// Size of the ring.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn offset_aligned(&self, offset: usize, align: usize) -> Option<usize> {
        align_up(self.base + offset, align).map(|addr| addr - self.base)
    }

    /// Offset where `len` bytes fit: after the head, else wrapped to the front of the ring.
    fn find_room(&self, len: usize, align: usize) -> Option<usize> {
        let tail = match self.in_flight.front() {
            None => {
                let start = self.offset_aligned(0, align)?;
                return (start.checked_add(len)? <= self.capacity).then_some(start);
            }
            Some(front) => front.start,
        };
        if self.head > tail {
            let start = self.offset_aligned(self.head, align)?;
            if start.checked_add(len)? <= self.capacity {
                return Some(start);
            }
            let start = self.offset_aligned(0, align)?;
            return (start.checked_add(len)? <= tail).then_some(start);
        }
        let start = self.offset_aligned(self.head, align)?;
        (start.checked_add(len)? <= tail).then_some(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{FakeTimeline, StreamId};

    #[test]
    fn random_copies_wrap_and_never_overlap_in_flight() {
        let timeline = FakeTimeline::new();
        let stream = StreamId(2);
        let base = 1 << 30;
        let capacity = 1 << 16;
        let mut ring = StagingRing::new(base, capacity);
        let mut live: VecDeque<(usize, usize, u64)> = VecDeque::new();
        let mut x: u64 = 0x0123_4567_89ab_cdef;
        let (mut value, mut completed, mut wraps, mut fulls) = (0u64, 0u64, 0, 0);
        let mut last_addr = 0;
        for _ in 0..4000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 4 == 0 && completed < value {
                completed += 1 + x % (value - completed).min(3);
                timeline.complete(stream, completed);
                live.retain(|&(_, _, v)| v > completed);
            }
            let size = (x >> 52) as usize % 9000 + 1;
            let align = 1 << (x % 9);
            match ring.alloc(size, align, &timeline) {
                Ok(slot) => {
                    assert_eq!(slot.addr % align, 0);
                    assert!(slot.addr >= base && slot.addr + size <= base + capacity);
                    if slot.addr < last_addr {
                        wraps += 1;
                    }
                    last_addr = slot.addr;
                    for &(a, s, _) in &live {
                        assert!(slot.addr + size <= a || a + s <= slot.addr, "overlap");
                    }
                    value += 1;
                    live.push_back((slot.addr, size, value));
                    ring.submit(slot, CompletionToken { stream, value })
                        .unwrap();
                }
                Err(MemError::StagingFull { in_flight, .. }) => {
                    assert!(in_flight > 0);
                    fulls += 1;
                }
                Err(other) => panic!("unexpected {other}"),
            }
        }
        assert!(wraps > 10 && fulls > 10, "wraps {wraps} fulls {fulls}");
        timeline.complete(stream, value);
        ring.retire(&timeline);
        assert_eq!(ring.in_flight_bytes(), 0);
        let stale = StagingSlot {
            addr: base,
            size: 1,
            seq: 999_999,
        };
        assert!(ring
            .submit(stale, CompletionToken { stream, value: 1 })
            .is_err());
    }
}
