//! Static memory planner: with every tensor's lifetime known at compile time, pack tensors into
//! one arena by offset (largest first into the best gap), honouring in-place reuse hints.

use serde::Serialize;

use crate::align::align_up;
use crate::MemError;

/// One tensor to place: its bytes, alignment and the steps of its first and last use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanRequest {
    /// Bytes.
    pub size: usize,
    /// Alignment of its offset (a power of two).
    pub align: usize,
    /// Step that writes it first.
    pub first: usize,
    /// Step that reads it last (inclusive).
    pub last: usize,
    /// An input this tensor may overwrite: that input's last use must be this tensor's first
    /// use and it must be at least as large; both then share one offset.
    pub inplace_of: Option<usize>,
}

/// Where each tensor lives in the arena.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemPlan {
    /// Offset of each request, in request order.
    pub offsets: Vec<usize>,
    /// Bytes the arena needs.
    pub arena_bytes: usize,
    /// Most bytes live at one step (in-place pairs counted once): no plan can be smaller.
    pub lower_bound_bytes: usize,
    /// Tensors placed on top of their input.
    pub inplace_shared: usize,
}

/// Tensors sharing one offset through in-place hints, placed as one item.
#[derive(Debug, Clone)]
struct Group {
    size: usize,
    align: usize,
    first: usize,
    last: usize,
    members: Vec<usize>,
}

fn invalid(tensor: usize, reason: impl Into<String>) -> MemError {
    MemError::InvalidPlan {
        tensor,
        reason: reason.into(),
    }
}

/// Validates the requests and merges in-place chains; returns groups and each tensor's group.
fn build_groups(requests: &[PlanRequest]) -> Result<(Vec<Group>, Vec<usize>), MemError> {
    let n = requests.len();
    let mut root: Vec<usize> = (0..n).collect();
    let mut taken = vec![false; n];
    for (j, req) in requests.iter().enumerate() {
        if !req.align.is_power_of_two() {
            return Err(invalid(
                j,
                format!("alignment {} is not a power of two", req.align),
            ));
        }
        if req.first > req.last {
            return Err(invalid(
                j,
                format!("first use {} after last use {}", req.first, req.last),
            ));
        }
        let Some(i) = req.inplace_of else { continue };
        let input = requests
            .get(i)
            .filter(|_| i < j)
            .ok_or_else(|| invalid(j, format!("in-place input {i} must be an earlier request")))?;
        if input.last != req.first {
            return Err(invalid(
                j,
                format!(
                    "in-place input {i} is last used at step {}, not at step {}",
                    input.last, req.first
                ),
            ));
        }
        if req.size > input.size {
            return Err(invalid(
                j,
                format!(
                    "{} bytes do not fit in-place in input {i} of {} bytes",
                    req.size, input.size
                ),
            ));
        }
        if std::mem::replace(&mut taken[i], true) {
            return Err(invalid(
                j,
                format!("input {i} is already overwritten in place by another tensor"),
            ));
        }
        root[j] = root[i];
    }
    let mut group_of = vec![usize::MAX; n];
    let mut groups: Vec<Group> = Vec::new();
    for (j, req) in requests.iter().enumerate() {
        let r = root[j];
        if group_of[r] == usize::MAX {
            group_of[r] = groups.len();
            groups.push(Group {
                size: 0,
                align: 1,
                first: req.first,
                last: req.last,
                members: Vec::new(),
            });
        }
        let g = &mut groups[group_of[r]];
        g.size = g.size.max(req.size);
        g.align = g.align.max(req.align);
        g.first = g.first.min(req.first);
        g.last = g.last.max(req.last);
        g.members.push(j);
        group_of[j] = group_of[r];
    }
    Ok((groups, group_of))
}

fn overlaps_in_time(a: &Group, b: &Group) -> bool {
    a.first <= b.last && b.first <= a.last
}

/// Places groups in `order`, each into the smallest gap among live neighbours that fits.
fn place(groups: &[Group], order: &[usize]) -> Option<(Vec<usize>, usize)> {
    let mut offsets = vec![usize::MAX; groups.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(groups.len());
    let mut arena = 0usize;
    let mut busy: Vec<(usize, usize)> = Vec::new();
    for &g in order {
        let group = &groups[g];
        busy.clear();
        busy.extend(
            placed
                .iter()
                .filter(|&&p| overlaps_in_time(&groups[p], group) && groups[p].size > 0)
                .map(|&p| (offsets[p], offsets[p] + groups[p].size)),
        );
        busy.sort_unstable();
        let mut best: Option<(usize, usize)> = None;
        let mut cursor = 0usize;
        for &(start, end) in &busy {
            let at = align_up(cursor, group.align)?;
            if at.checked_add(group.size)? <= start {
                let gap = start - cursor;
                if best.is_none_or(|b| gap < b.0) {
                    best = Some((gap, at));
                }
            }
            cursor = cursor.max(end);
        }
        let offset = match best {
            Some((_, at)) => at,
            None => align_up(cursor, group.align)?,
        };
        offsets[g] = offset;
        arena = arena.max(offset.checked_add(group.size)?);
        placed.push(g);
    }
    Some((offsets, arena))
}

fn lower_bound(groups: &[Group]) -> usize {
    let mut events: Vec<(usize, bool, usize)> = Vec::with_capacity(groups.len() * 2);
    for g in groups {
        events.push((g.first, false, g.size));
        events.push((g.last, true, g.size));
    }
    // At one step, allocations come before frees: both tensors are live during that step.
    events.sort_unstable();
    let (mut live, mut peak) = (0usize, 0usize);
    for (_, is_end, size) in events {
        if is_end {
            live -= size;
        } else {
            live += size;
            peak = peak.max(live);
        }
    }
    peak
}

/// Assigns arena offsets to tensors so that no two live at the same step overlap.
/// Tries largest-first and longest-lived-first orders and keeps the smaller arena.
///
/// # Errors
/// [`MemError::InvalidPlan`] for a bad alignment, a lifetime ending before it starts, or an
/// in-place hint whose input is not last used where the tensor is first used (or is smaller).
pub fn plan(requests: &[PlanRequest]) -> Result<MemPlan, MemError> {
    let (groups, group_of) = build_groups(requests)?;
    let mut by_size: Vec<usize> = (0..groups.len()).collect();
    by_size.sort_by_key(|&g| (std::cmp::Reverse(groups[g].size), groups[g].first));
    let mut by_life: Vec<usize> = (0..groups.len()).collect();
    by_life.sort_by_key(|&g| {
        let span = groups[g].last - groups[g].first;
        (
            std::cmp::Reverse(span),
            std::cmp::Reverse(groups[g].size),
            groups[g].first,
        )
    });
    let overflow = || invalid(0, "offsets overflow the address space");
    let first = place(&groups, &by_size).ok_or_else(overflow)?;
    let second = place(&groups, &by_life).ok_or_else(overflow)?;
    let (group_offsets, arena_bytes) = if second.1 < first.1 { second } else { first };
    let offsets = group_of.iter().map(|&g| group_offsets[g]).collect();
    Ok(MemPlan {
        offsets,
        arena_bytes,
        lower_bound_bytes: lower_bound(&groups),
        inplace_shared: requests.len() - groups.len(),
    })
}

/// Checks a plan: offsets aligned and inside the arena, and no two tensors live at the same
/// step overlapping in memory, except a tensor and the input it overwrites in place.
///
/// # Errors
/// [`MemError::InvalidPlan`] naming the first offending tensor.
pub fn verify_plan(requests: &[PlanRequest], plan: &MemPlan) -> Result<(), MemError> {
    let (_, group_of) = build_groups(requests)?;
    if plan.offsets.len() != requests.len() {
        return Err(invalid(
            0,
            format!(
                "{} offsets for {} tensors",
                plan.offsets.len(),
                requests.len()
            ),
        ));
    }
    for (i, (req, &off)) in requests.iter().zip(&plan.offsets).enumerate() {
        if off % req.align != 0 {
            return Err(invalid(
                i,
                format!("offset {off} is not aligned to {}", req.align),
            ));
        }
        if off
            .checked_add(req.size)
            .is_none_or(|end| end > plan.arena_bytes)
        {
            return Err(invalid(
                i,
                format!("offset {off} + {} bytes exceeds the arena", req.size),
            ));
        }
    }
    for i in 0..requests.len() {
        for j in i + 1..requests.len() {
            let (a, b) = (&requests[i], &requests[j]);
            let live_together = a.first <= b.last && b.first <= a.last;
            let (ao, bo) = (plan.offsets[i], plan.offsets[j]);
            let overlap = ao < bo + b.size && bo < ao + a.size && a.size > 0 && b.size > 0;
            let shared = group_of[i] == group_of[j] && ao == bo;
            if live_together && overlap && !shared {
                return Err(invalid(
                    j,
                    format!("overlaps tensor {i} while both are live"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
