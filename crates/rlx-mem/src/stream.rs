//! Stream-ordered reuse: a range freed on a stream is reused on that stream at once, and on
//! other streams only after the stream's completion token has been observed complete.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::tlsf::{Freed, NodeId, Tlsf};

/// A queue of device work (a CUDA stream, a wgpu queue). Work on one stream runs in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct StreamId(pub u32);

/// A point on a stream's timeline (a recorded event, a timeline-semaphore value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CompletionToken {
    /// The stream the point belongs to.
    pub stream: StreamId,
    /// Position on the stream's timeline; later work has larger values.
    pub value: u64,
}

/// Answers whether device work has finished. Backends wrap events or fences in it.
pub trait TokenSource: Send {
    /// Whether all work of `token.stream` up to `token.value` has completed.
    fn is_complete(&self, token: CompletionToken) -> bool;
}

/// A source for synchronous devices (the host): every token is already complete.
#[derive(Debug, Clone, Copy, Default)]
pub struct Synchronous;

impl TokenSource for Synchronous {
    fn is_complete(&self, _token: CompletionToken) -> bool {
        true
    }
}

/// A fake device timeline for tests: nothing completes until the test says so. Clones share
/// state, so a test keeps one to advance after handing the other to an allocator.
#[derive(Debug, Clone, Default)]
pub struct FakeTimeline {
    completed: Arc<Mutex<HashMap<StreamId, u64>>>,
}

impl FakeTimeline {
    /// A timeline on which no work has completed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the work of `stream` up to `value` as complete.
    pub fn complete(&self, stream: StreamId, value: u64) {
        let mut done = self.completed.lock().unwrap_or_else(|e| e.into_inner());
        let entry = done.entry(stream).or_insert(0);
        *entry = (*entry).max(value);
    }
}

impl TokenSource for FakeTimeline {
    fn is_complete(&self, token: CompletionToken) -> bool {
        let done = self.completed.lock().unwrap_or_else(|e| e.into_inner());
        done.get(&token.stream).is_some_and(|&v| v >= token.value)
    }
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    node: NodeId,
    size: usize,
    token: CompletionToken,
}

/// Ranges freed on streams and not yet known complete, per stream.
#[derive(Debug, Default)]
pub(crate) struct PendingRanges {
    per_stream: HashMap<StreamId, Vec<Pending>>,
    bytes: usize,
}

impl PendingRanges {
    /// Bytes held by pending ranges.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Records a range freed on `stream` (already marked pending in the TLSF).
    pub fn push(&mut self, tlsf: &Tlsf, node: NodeId, token: CompletionToken) {
        let size = tlsf.node(node).1;
        self.bytes += size;
        let entry = Pending { node, size, token };
        self.per_stream.entry(token.stream).or_default().push(entry);
    }

    /// Reuses a range freed on the same stream: stream order makes it safe without waiting.
    /// Best fit among that stream's ranges; leftovers stay pending with the same token.
    pub fn take_fit(
        &mut self,
        tlsf: &mut Tlsf,
        stream: StreamId,
        size: usize,
        align: usize,
    ) -> Option<NodeId> {
        let list = self.per_stream.get_mut(&stream)?;
        let mut order: Vec<usize> = (0..list.len()).filter(|&i| list[i].size >= size).collect();
        order.sort_by_key(|&i| list[i].size);
        for idx in order {
            let entry = list[idx];
            if let Some((used, rest)) = tlsf.take_pending(entry.node, size, align) {
                list.swap_remove(idx);
                self.bytes -= entry.size;
                for node in rest.into_iter().flatten() {
                    let size = tlsf.node(node).1;
                    self.bytes += size;
                    let leftover = Pending {
                        node,
                        size,
                        ..entry
                    };
                    list.push(leftover);
                }
                return Some(used);
            }
        }
        None
    }

    /// Frees every range whose token completed; says where each free landed.
    pub fn release_completed(&mut self, tlsf: &mut Tlsf, tokens: &dyn TokenSource) -> Vec<Freed> {
        let mut regions = Vec::new();
        for list in self.per_stream.values_mut() {
            let mut idx = 0;
            while idx < list.len() {
                if tokens.is_complete(list[idx].token) {
                    let entry = list.swap_remove(idx);
                    self.bytes -= entry.size;
                    regions.push(tlsf.free_range(entry.node));
                } else {
                    idx += 1;
                }
            }
        }
        regions
    }

    /// Whether any range is pending.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tlsf::UNIT;

    #[test]
    fn same_stream_reuses_at_once_others_wait_for_the_token() {
        let timeline = FakeTimeline::new();
        let mut tlsf = Tlsf::new();
        let region = tlsf.add_region(1 << 30, 1 << 20);
        let mut pending = PendingRanges::default();
        let (s0, s1) = (StreamId(0), StreamId(1));
        let mut x: u64 = 77;
        let mut nodes = Vec::new();
        for _ in 0..12 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let size = ((x >> 50) as usize % 40 + 1) * UNIT;
            nodes.push(tlsf.alloc(size, UNIT).unwrap());
        }
        for (i, &node) in nodes.iter().enumerate() {
            tlsf.mark_pending(node);
            let token = CompletionToken {
                stream: s0,
                value: i as u64 + 1,
            };
            pending.push(&tlsf, node, token);
        }
        let held = pending.bytes();
        assert!(held > 0);
        // Stream 1 finds nothing pending of its own; stream 0 reuses immediately.
        assert!(pending.take_fit(&mut tlsf, s1, UNIT, UNIT).is_none());
        let reused = pending.take_fit(&mut tlsf, s0, UNIT, UNIT).unwrap();
        assert!(pending.bytes() < held);
        // Nothing completes until the timeline advances.
        assert!(pending.release_completed(&mut tlsf, &timeline).is_empty());
        timeline.complete(s0, 5);
        let freed = pending.release_completed(&mut tlsf, &timeline);
        assert!(!freed.is_empty() && freed.iter().all(|f| f.region == region));
        timeline.complete(s0, 100);
        pending.release_completed(&mut tlsf, &timeline);
        assert!(pending.is_empty());
        tlsf.free(reused);
        tlsf.check();
        assert!(tlsf.region_is_empty(region));
        assert!(Synchronous.is_complete(CompletionToken {
            stream: s1,
            value: u64::MAX
        }));
    }
}
