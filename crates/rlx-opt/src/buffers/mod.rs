//! Buffer planning, written once for every backend: where each buffer of a
//! [`KernelProgram`] lives (its [`Home`]) and the layout of the one arena that holds the
//! temporaries and the backend's scratch regions.
//!
//! A backend describes its run as steps, each the list of [`Region`]s it touches (reads or
//! writes), and its arena's rules as an [`ArenaTarget`]; [`plan_buffers`] returns the
//! [`BufferPlan`]. A view (`alias_of`) lives in its root's storage. A region lives from the
//! first to the last step touching it; temporaries whose lifetimes do not overlap share
//! bytes, placed by `rlx-mem`'s static planner (largest or longest-lived first, each into
//! the smallest gap that fits). Planning is a pure function of (program, steps, target), so
//! tests check plans without a device.

use rlx_ir::kernel::{BufferId, BufferKind, KernelProgram};
use rlx_mem::{MemError, PlanRequest};

/// Memory one step touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// a program buffer, or a view of one (its root's storage is what is touched)
    Buffer(BufferId),
    /// one of the backend's scratch regions (an index into the sizes given to
    /// [`plan_buffers`])
    Scratch(usize),
}

/// Where a backend keeps temporaries that are program outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputHome {
    /// in the arena, live until the run ends so they can be read back; an output no step
    /// touches still gets a place of its own
    Arena,
    /// outside the arena, each in an allocation of its own per run (the CPU hands that
    /// allocation out as the result tensor, with no copy)
    Owned,
}

/// What a backend's arena requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaTarget {
    /// every offset is a multiple of this (a power of two)
    pub align: usize,
    /// every region takes at least this many bytes (devices that cannot bind empty ranges)
    pub min_bytes: usize,
    /// every region's size is rounded up to a multiple of this
    pub granule: usize,
    /// where outputs that are temporaries live
    pub outputs: OutputHome,
}

impl ArenaTarget {
    /// The bytes a region of `bytes` takes in the arena.
    pub fn region_bytes(&self, bytes: usize) -> usize {
        bytes
            .max(self.min_bytes)
            .next_multiple_of(self.granule.max(1))
    }
}

/// Where one buffer's storage is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Home {
    /// a program input, bound by the caller for each run
    Input,
    /// a session weight (`BufferKind::Param`)
    Weight,
    /// a constant of the program, uploaded once
    Constant,
    /// a temporary at this byte offset of the arena
    Arena(usize),
    /// a temporary that is a program output, kept outside the arena (`OutputHome::Owned`);
    /// the index into [`BufferPlan::owned`]
    Owned(usize),
    /// a temporary no step touches and no output names: it needs no storage
    Unused,
}

/// The steps, inclusive, during which a region must hold its contents. A program output
/// kept in the arena lasts until `last == steps.len()`, one past the last step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// first step touching it
    pub first: usize,
    /// last step touching it (or the end of the run)
    pub last: usize,
}

/// Where every buffer of a program lives, and the arena's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferPlan {
    /// per buffer, the buffer whose storage it lives in (itself when it is no view)
    pub roots: Vec<BufferId>,
    /// per buffer, its root's home
    pub homes: Vec<Home>,
    /// per buffer, its root's lifetime; None when no step touches it and it is no output
    pub lifetimes: Vec<Option<Lifetime>>,
    /// byte offset of each scratch region in the arena (0 for one no step touches)
    pub scratch: Vec<usize>,
    /// the temporaries outside the arena (`Home::Owned`), in index order
    pub owned: Vec<BufferId>,
    /// bytes of the arena
    pub arena_bytes: usize,
    /// most bytes live at one step: no arena can be smaller
    pub lower_bound_bytes: usize,
}

/// Bytes of a buffer with a static shape (0 for a symbolic one).
pub fn buffer_bytes(program: &KernelProgram, b: BufferId) -> usize {
    let t = &program.buffers[b].ty;
    t.shape
        .as_static()
        .map_or(0, |s| s.iter().product::<usize>())
        * t.dtype.size_bytes()
}

/// Plans where every buffer of `program` lives when the run touches, step by step, the
/// regions of `steps`; `scratch_bytes` gives each scratch region's size.
///
/// # Errors
/// [`MemError::InvalidPlan`] when `target.align` is not a power of two.
///
/// # Panics
/// When a step names a buffer or scratch region that does not exist.
pub fn plan_buffers(
    program: &KernelProgram,
    steps: &[Vec<Region>],
    scratch_bytes: &[usize],
    target: &ArenaTarget,
) -> Result<BufferPlan, MemError> {
    let n_buf = program.buffers.len();
    let roots: Vec<BufferId> = (0..n_buf)
        .map(|b| rlx_ir::kernel_views::root(program, b))
        .collect();
    let mut buffer_life: Vec<Option<Lifetime>> = vec![None; n_buf];
    let mut scratch_life: Vec<Option<Lifetime>> = vec![None; scratch_bytes.len()];
    for (s, regions) in steps.iter().enumerate() {
        for region in regions {
            let life = match *region {
                Region::Buffer(b) => &mut buffer_life[roots[b]],
                Region::Scratch(i) => &mut scratch_life[i],
            };
            life.get_or_insert(Lifetime { first: s, last: s }).last = s;
        }
    }
    let mut is_output = vec![false; n_buf];
    for (_, b) in &program.outputs {
        let r = roots[*b];
        is_output[r] = true;
        if target.outputs == OutputHome::Arena {
            let end = steps.len();
            buffer_life[r]
                .get_or_insert(Lifetime {
                    first: end,
                    last: end,
                })
                .last = end;
        }
    }
    let mut homes: Vec<Home> = program
        .buffers
        .iter()
        .map(|b| match b.kind {
            BufferKind::Input(_) => Home::Input,
            BufferKind::Param(_) => Home::Weight,
            BufferKind::Constant(_) => Home::Constant,
            BufferKind::Temp => Home::Unused,
        })
        .collect();
    // The arena's requests: temporary roots first, then scratch regions, each in index order.
    let mut requests = Vec::new();
    let mut placed = Vec::new();
    let mut owned = Vec::new();
    for r in 0..n_buf {
        if roots[r] != r || program.buffers[r].kind != BufferKind::Temp {
            continue;
        }
        if is_output[r] && target.outputs == OutputHome::Owned {
            homes[r] = Home::Owned(owned.len());
            owned.push(r);
        } else if let Some(life) = buffer_life[r] {
            requests.push(request(target, buffer_bytes(program, r), life));
            placed.push(Region::Buffer(r));
        }
    }
    for (i, life) in scratch_life.iter().enumerate() {
        if let Some(life) = life {
            requests.push(request(target, scratch_bytes[i], *life));
            placed.push(Region::Scratch(i));
        }
    }
    let arena = rlx_mem::plan(&requests)?;
    let mut scratch = vec![0; scratch_bytes.len()];
    for (region, &offset) in placed.iter().zip(&arena.offsets) {
        match *region {
            Region::Buffer(r) => homes[r] = Home::Arena(offset),
            Region::Scratch(i) => scratch[i] = offset,
        }
    }
    let homes = roots.iter().map(|&r| homes[r]).collect();
    let lifetimes = roots.iter().map(|&r| buffer_life[r]).collect();
    Ok(BufferPlan {
        roots,
        homes,
        lifetimes,
        scratch,
        owned,
        arena_bytes: arena.arena_bytes,
        lower_bound_bytes: arena.lower_bound_bytes,
    })
}

fn request(target: &ArenaTarget, bytes: usize, life: Lifetime) -> PlanRequest {
    PlanRequest {
        size: target.region_bytes(bytes),
        align: target.align,
        first: life.first,
        last: life.last,
        inplace_of: None,
    }
}

#[cfg(test)]
mod tests;
