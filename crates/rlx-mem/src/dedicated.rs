//! Dedicated blocks: one provider block per large request, sized exactly. Freed blocks stay
//! cached and are reused by best fit (within a slack of 1/8), and go back to the provider when a
//! request misses the cache or on trim.

use crate::provider::Block;
use crate::stream::{CompletionToken, StreamId, TokenSource};

/// A cached block is reused only if it wastes at most 1/SLACK_DIV of the request.
const SLACK_DIV: usize = 8;

/// Index of a dedicated block.
pub type SlotId = u32;

#[derive(Debug)]
struct Slot {
    block: Block,
    in_use: bool,
    /// Set when freed on a stream: other streams wait for this token.
    token: Option<CompletionToken>,
}

/// Dedicated blocks, in use or cached.
#[derive(Debug, Default)]
pub(crate) struct DedicatedCache {
    slots: Vec<Option<Slot>>,
    spare: Vec<SlotId>,
    bytes: usize,
}

fn usable(slot: &Slot, stream: Option<StreamId>, tokens: &dyn TokenSource) -> bool {
    match slot.token {
        None => true,
        Some(token) => Some(token.stream) == stream || tokens.is_complete(token),
    }
}

impl DedicatedCache {
    /// Bytes of all dedicated blocks.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Largest cached block that nothing uses.
    pub fn largest_idle(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|s| !s.in_use)
            .map(|s| s.block.size)
            .max()
            .unwrap_or(0)
    }

    /// Takes the best-fitting cached block for `size` bytes at `align`, if one is close enough.
    pub fn reuse(
        &mut self,
        size: usize,
        align: usize,
        stream: Option<StreamId>,
        tokens: &dyn TokenSource,
    ) -> Option<(SlotId, usize)> {
        let limit = size.saturating_add(size / SLACK_DIV);
        let mut best: Option<(usize, SlotId)> = None;
        for (id, slot) in self.slots.iter().enumerate() {
            let Some(slot) = slot else { continue };
            let fits =
                slot.block.size >= size && slot.block.size <= limit && slot.block.addr % align == 0;
            if !slot.in_use
                && fits
                && usable(slot, stream, tokens)
                && best.is_none_or(|b| slot.block.size < b.0)
            {
                best = Some((slot.block.size, id as SlotId));
            }
        }
        let (_, id) = best?;
        let slot = self.slots[id as usize].as_mut()?;
        slot.in_use = true;
        slot.token = None;
        Some((id, slot.block.addr))
    }

    /// Registers a fresh block, in use.
    pub fn insert(&mut self, block: Block) -> SlotId {
        self.bytes += block.size;
        let slot = Slot {
            block,
            in_use: true,
            token: None,
        };
        match self.spare.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(slot);
                id
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as SlotId
            }
        }
    }

    /// The block behind a slot.
    pub fn block(&self, id: SlotId) -> Option<&Block> {
        self.slots.get(id as usize)?.as_ref().map(|s| &s.block)
    }

    /// Whether `id` names a block in use.
    pub fn is_in_use(&self, id: SlotId) -> bool {
        self.slots
            .get(id as usize)
            .and_then(Option::as_ref)
            .is_some_and(|s| s.in_use)
    }

    /// Caches a block its user freed; `token` delays reuse by other streams.
    pub fn release(&mut self, id: SlotId, token: Option<CompletionToken>) {
        if let Some(slot) = self.slots.get_mut(id as usize).and_then(Option::as_mut) {
            slot.in_use = false;
            slot.token = token;
        }
    }

    /// Removes cached blocks that no stream may still use, for return to the provider.
    pub fn drain_idle(&mut self, tokens: &dyn TokenSource) -> Vec<Block> {
        let mut out = Vec::new();
        for (id, entry) in self.slots.iter_mut().enumerate() {
            let idle = entry
                .as_ref()
                .is_some_and(|s| !s.in_use && usable(s, None, tokens));
            if idle {
                if let Some(slot) = entry.take() {
                    self.bytes -= slot.block.size;
                    self.spare.push(id as SlotId);
                    out.push(slot.block);
                }
            }
        }
        out
    }

    /// Removes every block, in use or not (the allocator is going away).
    pub fn drain_all(&mut self) -> Vec<Block> {
        self.spare.clear();
        self.bytes = 0;
        self.slots.drain(..).flatten().map(|s| s.block).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{FakeTimeline, Synchronous};

    fn block(addr: usize, size: usize) -> Block {
        Block {
            addr,
            size,
            align: 4096,
            exportable: false,
            handle: 0,
        }
    }

    #[test]
    fn best_fit_reuse_within_slack_and_token_order() {
        let mut cache = DedicatedCache::default();
        let sizes = [9_000_000usize, 10_500_000, 12_000_000, 40_000_000];
        let ids: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| cache.insert(block((i + 1) << 32, s)))
            .collect();
        assert_eq!(cache.bytes(), sizes.iter().sum::<usize>());
        for &id in &ids {
            cache.release(id, None);
        }
        // 10.2 MB fits 10.5 MB (within 1/8) and 12 MB; best fit picks 10.5 MB.
        let (id, _) = cache.reuse(10_200_000, 256, None, &Synchronous).unwrap();
        assert_eq!(id, ids[1]);
        // 30 MB would waste more than 1/8 of 40 MB: no reuse.
        assert!(cache.reuse(30_000_000, 256, None, &Synchronous).is_none());
        // A block freed on stream 3 is reused by stream 3 at once, by others after completion.
        let timeline = FakeTimeline::new();
        let token = CompletionToken {
            stream: StreamId(3),
            value: 9,
        };
        cache.release(ids[3], Some(token));
        assert!(cache
            .reuse(39_000_000, 256, Some(StreamId(1)), &timeline)
            .is_none());
        assert!(cache
            .drain_idle(&timeline)
            .iter()
            .all(|b| b.size != 40_000_000));
        timeline.complete(StreamId(3), 9);
        let (again, _) = cache
            .reuse(39_000_000, 256, Some(StreamId(1)), &timeline)
            .unwrap();
        assert_eq!(again, ids[3]);
        assert!(cache.is_in_use(again));
        assert_eq!(cache.largest_idle(), 0);
        assert_eq!(cache.drain_all().len(), 2);
        assert_eq!(cache.bytes(), 0);
    }
}
