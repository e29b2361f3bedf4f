//! Managed memory before a run: the device addresses a program uses (arena, inputs,
//! constants, weights, derived buffers, pointer tables), whose device-preferred blocks are
//! prefetched to the device before every run or the first one, as
//! [`crate::settings::ManagedOptions::prefetch`] says. With device memory, or prefetch off,
//! the plan is empty and a run does nothing here.

use super::*;
use crate::settings::Prefetch;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a program prefetches before its runs, and when.
#[derive(Default)]
pub(super) struct PrefetchPlan {
    mem: Option<Arc<DeviceMemory>>,
    ptrs: Vec<u64>,
    once: bool,
    done: AtomicBool,
}

impl PrefetchPlan {
    /// The plan of `program`, whose memory came from `mem` of kind `kind`.
    pub(super) fn new(program: &CudaProgram, mem: Arc<DeviceMemory>, kind: MemoryKind) -> Self {
        let MemoryKind::Managed(options) = kind else {
            return PrefetchPlan::default();
        };
        if options.prefetch == Prefetch::Off {
            return PrefetchPlan::default();
        }
        let mut ptrs = vec![program.arena.ptr()];
        ptrs.extend(program.inputs.iter().map(|i| i.2.ptr()));
        ptrs.extend(program.constants.iter().map(|c| c.ptr()));
        ptrs.extend(program.params.iter().map(|p| p.2.buffer().ptr()));
        ptrs.extend(program.derived.iter().map(|d| d.buffer.ptr()));
        ptrs.extend(program.pointer_tables.iter().flatten().map(|t| t.ptr()));
        PrefetchPlan {
            mem: Some(mem),
            ptrs,
            once: options.prefetch == Prefetch::Once,
            done: AtomicBool::new(false),
        }
    }

    /// Enqueues the prefetch when one is due (outside any graph capture: the caller holds
    /// the device's queue); the bytes asked for.
    ///
    /// # Errors
    /// The driver refuses a prefetch.
    pub(super) fn before_run(&self) -> Result<usize, CudaError> {
        let Some(mem) = &self.mem else {
            return Ok(0);
        };
        if self.once && self.done.swap(true, Ordering::Relaxed) {
            return Ok(0);
        }
        mem.prefetch(&self.ptrs)
    }
}
