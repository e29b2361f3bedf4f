//! Row-parallel templates share one frame: a row is handled by a warp (short rows) or a
//! whole block (long rows, few of them), with `rlx_warp_*` / `rlx_block_*` reductions from
//! the prelude.

use super::{grid_for, Launch, Target};

/// How a row is spread over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowGroup {
    /// threads per row: 32 (a warp) or 256 (a block)
    pub size: u32,
}

impl RowGroup {
    /// A warp per row unless rows are long and too few to fill the device.
    pub fn pick(rows: usize, len: usize, target: &Target) -> RowGroup {
        let few = rows < target.sm_count as usize * 8;
        RowGroup {
            size: if len > 2048 && few { 256 } else { 32 },
        }
    }

    /// The thread's position in its row group.
    pub fn lane(&self) -> &'static str {
        if self.size == 32 {
            "(threadIdx.x & 31)"
        } else {
            "threadIdx.x"
        }
    }

    /// First row of this thread and the row step of the grid-stride loop.
    pub fn rows(&self) -> (&'static str, &'static str) {
        if self.size == 32 {
            ("blockIdx.x * 8 + (threadIdx.x >> 5)", "gridDim.x * 8")
        } else {
            ("blockIdx.x", "gridDim.x")
        }
    }

    /// `rlx_warp_sum` or `rlx_block_sum` (and `max`).
    pub fn reduce(&self, what: &str) -> String {
        let scope = if self.size == 32 { "warp" } else { "block" };
        format!("rlx_{scope}_{what}")
    }

    /// The launch for `rows` rows (blocks of 256 threads).
    pub fn launch(&self, rows: usize) -> Launch {
        let per_block = if self.size == 32 { 8 } else { 1 };
        Launch::linear(grid_for(rows, per_block).min(1 << 20), 256)
    }
}
