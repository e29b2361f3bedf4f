//! The paged KV cache's bookkeeping: a pool of fixed-size blocks (rows of every layer's K
//! and V) shared by all sequences, a free list, and per sequence slot the list of its blocks
//! — the block table the attention kernels read. The device memory itself is one
//! allocation of the engine; this module only decides which block holds which rows.

use crate::LlmError;

/// Rows per KV block.
pub const BLOCK_ROWS: usize = 16;

/// Which blocks each sequence slot holds.
#[derive(Debug, Clone)]
pub struct BlockTable {
    free: Vec<u32>,
    slots: Vec<Option<Vec<u32>>>,
    /// blocks in the pool
    pub blocks: usize,
    /// most blocks one sequence may hold (its context / [`BLOCK_ROWS`])
    pub max_blocks: usize,
}

impl BlockTable {
    /// A pool of `blocks` blocks for up to `slots` sequences of `max_blocks` blocks each.
    pub fn new(blocks: usize, slots: usize, max_blocks: usize) -> BlockTable {
        BlockTable {
            free: (0..blocks as u32).rev().collect(),
            slots: vec![None; slots],
            blocks,
            max_blocks,
        }
    }

    /// Takes a free sequence slot.
    ///
    /// # Errors
    /// Every slot is in use.
    pub fn open(&mut self) -> Result<usize, LlmError> {
        let slot = self.slots.iter().position(Option::is_none).ok_or_else(|| {
            LlmError::Capacity(format!(
                "all {} sequence slots are in use (raise max_sequences)",
                self.slots.len()
            ))
        })?;
        self.slots[slot] = Some(Vec::new());
        Ok(slot)
    }

    /// Gives a slot's blocks back to the pool and frees the slot.
    pub fn close(&mut self, slot: usize) {
        if let Some(Some(blocks)) = self.slots.get_mut(slot).map(Option::take) {
            self.free.extend(blocks.into_iter().rev());
        }
    }

    /// Makes `slot` hold at least `rows` rows; returns the index of its first new block
    /// (its whole list when nothing was added is unchanged), so the caller uploads only
    /// what changed.
    ///
    /// # Errors
    /// More rows than one sequence may hold, or the pool is exhausted (nothing is taken
    /// then).
    pub fn reserve(&mut self, slot: usize, rows: usize) -> Result<usize, LlmError> {
        let need = rows.div_ceil(BLOCK_ROWS);
        if need > self.max_blocks {
            return Err(LlmError::Capacity(format!(
                "{rows} rows exceed the context of {} rows per sequence",
                self.max_blocks * BLOCK_ROWS
            )));
        }
        let free = self.free.len();
        let blocks = self
            .slots
            .get_mut(slot)
            .and_then(Option::as_mut)
            .ok_or_else(|| LlmError::Invalid(format!("sequence slot {slot} is not open")))?;
        let had = blocks.len();
        if need <= had {
            return Ok(had);
        }
        if need - had > free {
            return Err(LlmError::Capacity(format!(
                "the KV cache is full: {} more blocks of {BLOCK_ROWS} rows needed, {free} free \
                 of {} (finish or remove other sequences, or give the cache more memory)",
                need - had,
                self.blocks
            )));
        }
        for _ in had..need {
            blocks.push(self.free.pop().expect("counted above"));
        }
        Ok(had)
    }

    /// The blocks of a slot (empty when closed).
    pub fn blocks(&self, slot: usize) -> &[u32] {
        self.slots
            .get(slot)
            .and_then(Option::as_ref)
            .map_or(&[], Vec::as_slice)
    }

    /// Blocks not held by any sequence.
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_shared_reserved_and_returned() {
        let mut t = BlockTable::new(8, 2, 4);
        let a = t.open().unwrap();
        let b = t.open().unwrap();
        assert!(t.open().is_err(), "two slots only");
        assert_eq!(t.reserve(a, 17).unwrap(), 0);
        assert_eq!(t.blocks(a).len(), 2);
        assert_eq!(t.reserve(a, 20).unwrap(), 2, "no new block needed");
        assert_eq!(t.reserve(b, 64).unwrap(), 0);
        assert_eq!(t.free_blocks(), 2);
        let err = t.reserve(a, 65).unwrap_err().to_string();
        assert!(err.contains("context"), "{err}");
        t.close(b);
        assert_eq!(t.free_blocks(), 6);
        assert_eq!(t.reserve(a, 64).unwrap(), 2);
        let mut all: Vec<u32> = t.blocks(a).to_vec();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 4, "distinct blocks");
        let mut small = BlockTable::new(1, 1, 4);
        let s = small.open().unwrap();
        let err = small.reserve(s, 17).unwrap_err().to_string();
        assert!(err.contains("KV cache is full"), "{err}");
        assert_eq!(small.free_blocks(), 1, "nothing taken on failure");
    }
}
