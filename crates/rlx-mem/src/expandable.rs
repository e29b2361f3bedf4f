//! Expandable segments: the sub-allocator's ranges live in large virtual address ranges
//! (segments) and physical memory is mapped into them granule by granule, only where an
//! allocation needs it (CUDA `cuMemAddressReserve` + `cuMemCreate` + `cuMemMap`, as PyTorch's
//! `expandable_segments`; on the host `mmap(PROT_NONE)` plus `mprotect` / `madvise`).
//!
//! Physical memory comes in pieces ("granules") of a power-of-two number of the provider's
//! granules (*units*); a piece of `n` units is always mapped at a multiple of `n` units, so a
//! segment is a buddy-like mosaic of pieces of mixed sizes. Their size is chosen when they are
//! created, by the [`GranulePolicy`]: the provider's granule, a fixed size, or online, without
//! knowing the peak in advance — a size that grows with the physical memory already held
//! (`Proportional`), or (`Spanning`, the default online policy) a piece fitted to the request:
//! as large as the aligned free block and the request's missing span allow, so a large request
//! gets a few large pieces at once, while the part of a piece that sticks out of the request
//! stays below a target that grows with what is held.
//!
//! Per unit of a segment: *needed* or not (a live or pending range overlaps it) and the mapped
//! piece covering it, if any. A piece none of whose units is needed is *cached*: it stays
//! mapped, so alloc/free churn over the same addresses costs no provider call. An allocation
//! covers each unmapped unit it needs with a piece: an unmapped one from the pool, else a
//! cached one unmapped elsewhere (the highest-address one, as CUDA remaps a physical handle),
//! else a new one from the provider — each time the largest piece whose aligned span around
//! the unit is entirely unmapped (for the pool and the cache; a new piece is at most the
//! policy's size; with fitted pieces a cached piece is also moved rather than a new one
//! created when the free aligned block allows only a piece below the target). Smaller pieces
//! fill spans built for bigger ones, so a free piece of any size can be reused. Highest
//! address first because ranges are placed low (best fit, lowest address), so the top of a
//! segment is what the next allocations are least likely to reuse; taking the least recently
//! freed piece instead needed about twice the map calls on the shared traces. So the physical
//! memory held is the most needed at once plus what pieces of the wrong size leave idle,
//! unless the cache limits below release memory (then it can be less, at the price of more
//! calls).

use serde::Serialize;

use std::collections::BTreeSet;

use crate::provider::{BlockProvider, PhysicalGranule, VirtualRange};
use crate::stats::Stats;
use crate::tlsf::{Freed, RegionId};
use crate::MemError;

/// Settings of the expandable mode ([`crate::AllocatorConfig::expandable`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpandableConfig {
    /// Address space reserved per segment. One segment normally serves everything; a request
    /// that fits in no segment gets a new one (at least its own size).
    pub segment_size: usize,
    /// Mapped pieces that no allocation uses are kept mapped up to this many bytes; beyond,
    /// the highest ones are unmapped into the physical pool.
    pub max_cached_bytes: usize,
    /// Unmapped physical pieces kept for remapping up to this many bytes; beyond, they are
    /// released to the provider (largest first).
    pub max_pooled_bytes: usize,
    /// Headroom, in thousandths of the peak bytes in use so far: while the physical memory held
    /// stays below that peak plus the headroom, a missing granule is created new rather than
    /// taken from a cached granule elsewhere (which costs an unmap and a map). 0 always remaps
    /// first, so physical memory never exceeds the most granules needed at once.
    pub headroom_permille: u32,
    /// Size of the physical pieces created.
    pub granules: GranulePolicy,
}

impl Default for ExpandableConfig {
    fn default() -> Self {
        ExpandableConfig {
            segment_size: 64 << 30,
            max_cached_bytes: usize::MAX,
            max_pooled_bytes: usize::MAX,
            headroom_permille: 0,
            granules: GranulePolicy::Provider,
        }
    }
}

/// How large the physical pieces of an expandable segment are ([`ExpandableConfig::granules`]).
/// Sizes are powers of two, at least the provider's granule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum GranulePolicy {
    /// The provider's granule ([`BlockProvider::granule_size`]), CUDA's 2 MiB.
    Provider,
    /// Every piece has this size (rounded up to a power of two, at least the provider's granule).
    Fixed {
        /// Bytes per piece.
        bytes: usize,
    },
    /// Online: each new piece is the largest power of two not above the physical memory held
    /// so far divided by `divisor`, clamped to `min_bytes..=max_bytes` (then to a power of two
    /// of at least the provider's granule). Pieces grow with the segment, so the number of
    /// creations grows with the logarithm of the peak, not the peak, and the last pieces stay a
    /// small share of it; no knowledge of the peak is needed.
    Proportional {
        /// Held bytes per piece size (12: a new piece is at most 1/12 of what is held).
        divisor: usize,
        /// Smallest piece.
        min_bytes: usize,
        /// Largest piece.
        max_bytes: usize,
    },
    /// Online and fitted to the request (the default, [`GranulePolicy::online`]). The *target*
    /// is the `Proportional` size (held / `divisor` rounded down to a power of two, clamped to
    /// `min_bytes..=max_bytes`). A new piece is the largest aligned power of two around the
    /// missing unit that sticks out of the request's unmapped span by less than the target, at
    /// most the peak in use (this request included) / `peak_divisor` unless that is below the
    /// target: a large request gets large pieces at once, whatever is held, while the bytes
    /// a piece leaves idle stay below the target. Where the free span's alignment allows only
    /// a piece smaller than the target, a cached piece is moved there rather than a new one
    /// created.
    Spanning {
        /// Held bytes per byte of target.
        divisor: usize,
        /// Smallest target.
        min_bytes: usize,
        /// Largest piece.
        max_bytes: usize,
        /// Peak bytes in use per byte of a piece fitted to a request.
        peak_divisor: usize,
    },
}

impl GranulePolicy {
    /// The online policy the trace replay uses by default: pieces fitted to requests, target
    /// held / 20 of at least 4 MiB, pieces up to the peak in use / 6 and 1 GiB. Chosen so that
    /// the generated presets ([`crate::TraceSpec::presets`], a 0.5B- to a 13B-class model) and
    /// the shared llama-8B traces stay within 1.05 fragmentation and 100 provider allocations
    /// (`crates/rlx-mem/tests/policy_traces.rs`): a larger target overshoots the small
    /// model's peak, a smaller one costs too many creations on mid-sized traces. Other seeds
    /// of the large presets can still take more than 100 (`bench/mem.md` has the figures).
    pub const fn online() -> Self {
        GranulePolicy::Spanning {
            divisor: 20,
            min_bytes: 4 << 20,
            max_bytes: 1 << 30,
            peak_divisor: 6,
        }
    }

    /// The previous online default, kept for comparison: `Proportional`, held / 12,
    /// 8 MiB..1 GiB. Its 8 MiB floor overshoots small peaks, and a large request made while
    /// little is held costs many small pieces.
    pub const fn proportional() -> Self {
        GranulePolicy::Proportional {
            divisor: 12,
            min_bytes: 8 << 20,
            max_bytes: 1 << 30,
        }
    }

    /// The policy once the caller expects about `peak` bytes in use at once (a scale hint:
    /// weights, KV cache and planned arenas, known before they are allocated). The online
    /// policies then create pieces of at least `peak` / [`EXPECTED_PIECES`] (rounded down to a
    /// power of two, at most their largest piece) from the first one: the pieces a growing
    /// segment would otherwise climb through are skipped, and the last one still idles at most
    /// about 1/[`EXPECTED_PIECES`] of the peak. `Provider` and `Fixed` are returned unchanged.
    pub fn expecting(self, peak: usize) -> Self {
        let floor = |min_bytes: usize, max_bytes: usize| {
            let share = peak / EXPECTED_PIECES;
            if share == 0 {
                return min_bytes;
            }
            let pow2 = 1usize << floor_log2(share);
            pow2.min(max_bytes).max(min_bytes)
        };
        match self {
            GranulePolicy::Proportional {
                divisor,
                min_bytes,
                max_bytes,
            } => GranulePolicy::Proportional {
                divisor,
                min_bytes: floor(min_bytes, max_bytes),
                max_bytes,
            },
            GranulePolicy::Spanning {
                divisor,
                min_bytes,
                max_bytes,
                peak_divisor,
            } => GranulePolicy::Spanning {
                divisor,
                min_bytes: floor(min_bytes, max_bytes),
                max_bytes,
                peak_divisor,
            },
            other => other,
        }
    }

    /// Bytes of the next piece created when `held` bytes are held, for a provider granule of
    /// `unit` bytes (a power of two).
    pub fn piece_size(&self, held: usize, unit: usize) -> usize {
        let bytes = match *self {
            GranulePolicy::Provider => unit,
            GranulePolicy::Fixed { bytes } => bytes,
            GranulePolicy::Proportional {
                divisor,
                min_bytes,
                max_bytes,
            }
            | GranulePolicy::Spanning {
                divisor,
                min_bytes,
                max_bytes,
                ..
            } => {
                let share = held / divisor.max(1);
                let floor = if share == 0 {
                    0
                } else {
                    1 << (usize::BITS - 1 - share.leading_zeros())
                };
                floor.min(max_bytes).max(min_bytes)
            }
        };
        bytes
            .max(unit)
            .checked_next_power_of_two()
            .unwrap_or(1 << (usize::BITS - 1))
    }
}

impl std::fmt::Display for GranulePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::stats::human_bytes;
        match *self {
            GranulePolicy::Provider => write!(f, "provider granule"),
            GranulePolicy::Fixed { bytes } => write!(f, "fixed {}", human_bytes(bytes)),
            GranulePolicy::Proportional {
                divisor,
                min_bytes,
                max_bytes,
            } => write!(
                f,
                "online: held/{divisor}, {}..{}",
                human_bytes(min_bytes),
                human_bytes(max_bytes)
            ),
            GranulePolicy::Spanning {
                divisor,
                min_bytes,
                max_bytes,
                peak_divisor,
            } => write!(
                f,
                "online, fitted to requests: target held/{divisor} ({}..), pieces up to \
                 peak/{peak_divisor} and {}",
                human_bytes(min_bytes),
                human_bytes(max_bytes)
            ),
        }
    }
}

/// Pieces a scale hint sizes the smallest piece for ([`GranulePolicy::expecting`]): a peak
/// reached in about this many pieces keeps both the creations and the idle tail of the last
/// piece within bounds (≤ 100 provider allocations, ≤ 1.05 fragmentation).
pub const EXPECTED_PIECES: usize = 100;

/// `floor(log2(n))`, 0 for 0.
fn floor_log2(n: usize) -> usize {
    (usize::BITS - 1).saturating_sub(n.leading_zeros()) as usize
}

/// The class of a piece fitted to a request ([`GranulePolicy::Spanning`]) for unmapped unit `u`
/// of a span ending at unit `last`: the largest class up to `limit` (the free aligned block
/// around `u`, capped) whose aligned block around `u` sticks out of `u..=last` by less than a
/// piece of class `target`; `target` itself (or `limit`, if smaller) always qualifies.
pub(crate) fn fitted_class(u: usize, last: usize, limit: usize, target: usize) -> usize {
    (target.min(limit)..=limit)
        .rev()
        .find(|&c| {
            let n = 1usize << c;
            let base = u & !(n - 1);
            let overhang = (u - base) + (base + n - 1).saturating_sub(last);
            c <= target || overhang < 1 << target
        })
        .unwrap_or(0)
}

/// Number of piece size classes (a piece of class `c` is `2^c` units).
const CLASSES: usize = 40;
/// Owner of an unmapped unit.
const NONE: u32 = u32::MAX;
/// Owner of a unit about to be mapped by the call in progress.
const PLANNED: u32 = u32::MAX - 1;

/// A physical piece mapped into a segment.
#[derive(Debug, Clone, Copy)]
struct Piece {
    granule: PhysicalGranule,
    class: u8,
    /// First unit; `usize::MAX` marks a free slot.
    base: usize,
    /// Needed units it covers; 0 means cached.
    busy: u32,
}

/// One virtual range and the state of its units (vectors grow to the highest unit touched).
#[derive(Debug)]
struct Segment {
    range: VirtualRange,
    /// Units in the range.
    units: usize,
    needed: Vec<bool>,
    /// Per unit: slot in `pieces`, `NONE` or `PLANNED`.
    owner: Vec<u32>,
    pieces: Vec<Piece>,
    free_slots: Vec<u32>,
    /// Per class: first units of the cached pieces.
    cached: Vec<BTreeSet<usize>>,
    mapped_units: usize,
    cached_units: usize,
}

impl Segment {
    fn new(range: VirtualRange, shift: u32) -> Self {
        Segment {
            units: range.size >> shift,
            range,
            needed: Vec::new(),
            owner: Vec::new(),
            pieces: Vec::new(),
            free_slots: Vec::new(),
            cached: vec![BTreeSet::new(); CLASSES],
            mapped_units: 0,
            cached_units: 0,
        }
    }

    fn cover(&mut self, units: usize) {
        if self.needed.len() < units {
            self.needed.resize(units, false);
            self.owner.resize(units, NONE);
        }
    }

    fn owner_of(&self, unit: usize) -> u32 {
        self.owner.get(unit).copied().unwrap_or(NONE)
    }

    /// Largest class `c <= limit` whose aligned span of `2^c` units around `unit` (unmapped
    /// itself) is unmapped and inside the range.
    fn free_class_at(&self, unit: usize, limit: usize) -> usize {
        let mut class = 0;
        while class < limit {
            let half = 1usize << class;
            let base = unit & !(2 * half - 1);
            if base + 2 * half > self.units {
                break;
            }
            let sibling = (unit & !(half - 1)) ^ half;
            if (sibling..sibling + half).any(|u| self.owner_of(u) != NONE) {
                break;
            }
            class += 1;
        }
        class
    }

    /// A unit became needed: its piece (if any) is busy.
    fn need(&mut self, unit: usize) -> bool {
        self.needed[unit] = true;
        let slot = self.owner[unit];
        if slot >= PLANNED {
            return false;
        }
        let piece = &mut self.pieces[slot as usize];
        piece.busy += 1;
        if piece.busy == 1 {
            self.cached[piece.class as usize].remove(&piece.base);
            self.cached_units -= 1 << piece.class;
        }
        true
    }

    /// A unit is no longer needed: its piece may become cached.
    fn release(&mut self, unit: usize) {
        self.needed[unit] = false;
        let slot = self.owner[unit];
        if slot >= PLANNED {
            return;
        }
        let piece = &mut self.pieces[slot as usize];
        piece.busy -= 1;
        if piece.busy == 0 {
            self.cached[piece.class as usize].insert(piece.base);
            self.cached_units += 1 << piece.class;
        }
    }

    /// Records `granule` as mapped at `base` (its units were `PLANNED`).
    fn install(&mut self, base: usize, granule: PhysicalGranule, class: u8) {
        let n = 1usize << class;
        let busy = self.needed[base..base + n].iter().filter(|&&b| b).count() as u32;
        let piece = Piece {
            granule,
            class,
            base,
            busy,
        };
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.pieces[slot as usize] = piece;
                slot
            }
            None => {
                self.pieces.push(piece);
                (self.pieces.len() - 1) as u32
            }
        };
        self.owner[base..base + n].fill(slot);
        self.mapped_units += n;
        if busy == 0 {
            self.cached[class as usize].insert(base);
            self.cached_units += n;
        }
    }

    /// Forgets the (cached, already taken out of `cached`) piece at `base`; returns it.
    fn uninstall(&mut self, base: usize) -> (PhysicalGranule, u8) {
        let slot = self.owner[base];
        let piece = self.pieces[slot as usize];
        debug_assert_eq!((piece.base, piece.busy), (base, 0));
        let n = 1usize << piece.class;
        self.owner[base..base + n].fill(NONE);
        self.pieces[slot as usize].base = usize::MAX;
        self.free_slots.push(slot);
        self.mapped_units -= n;
        (piece.granule, piece.class)
    }

    /// Takes the cached piece ending highest out of the cached sets; returns its first unit.
    fn take_highest_cached(&mut self) -> Option<usize> {
        let (class, base) = (0..CLASSES)
            .filter_map(|c| self.cached[c].last().map(|&b| (c, b)))
            .max_by_key(|&(c, b)| b + (1 << c))?;
        self.cached[class].remove(&base);
        self.cached_units -= 1 << class;
        Some(base)
    }
}

/// Counters of the expandable mode, folded into [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct VmCounters {
    pub creates: u64,
    pub releases: u64,
    pub map_calls: u64,
    pub unmap_calls: u64,
    /// Physical pieces mapped / unmapped (of any size).
    pub granules_mapped: u64,
    pub granules_unmapped: u64,
    pub mapped_bytes: usize,
    pub peak_mapped_bytes: usize,
}

/// The segments of one sub-allocator and its pool of unmapped physical pieces.
#[derive(Debug)]
pub(crate) struct Expandable {
    config: ExpandableConfig,
    /// The policy configured, before any scale hint.
    base_policy: GranulePolicy,
    /// The largest peak hinted ([`Expandable::expect_peak`]), 0 for none.
    expected: usize,
    unit: usize,
    shift: u32,
    segments: Vec<Option<Segment>>,
    /// Unmapped physical pieces by class.
    pool: Vec<Vec<PhysicalGranule>>,
    pooled_bytes: usize,
    /// Physical bytes held (created and not released).
    held: usize,
    /// Pieces created by class.
    created: Vec<u64>,
    plan: Vec<(usize, PhysicalGranule, u8)>,
    scratch: Vec<PhysicalGranule>,
    bases: Vec<usize>,
    counters: VmCounters,
}

/// Unmaps the pieces of `seg` starting at `bases` (taken out of the cached sets already), one
/// call per run of adjacent pieces, and pushes them to `pool`.
fn unmap_bases(
    provider: &mut dyn BlockProvider,
    counters: &mut VmCounters,
    shift: u32,
    seg: &mut Segment,
    bases: &mut [usize],
    pool: &mut [Vec<PhysicalGranule>],
    pooled_bytes: &mut usize,
) {
    bases.sort_unstable();
    let mut i = 0;
    while i < bases.len() {
        let start = bases[i];
        let mut end = start;
        while i < bases.len() && bases[i] == end {
            let (granule, class) = seg.uninstall(end);
            end += 1 << class;
            counters.granules_unmapped += 1;
            counters.mapped_bytes -= granule.size;
            *pooled_bytes += granule.size;
            pool[class as usize].push(granule);
            i += 1;
        }
        provider.unmap(&seg.range, start << shift, (end - start) << shift);
        counters.unmap_calls += 1;
    }
}

impl Expandable {
    /// The mode over a provider whose granule ([`BlockProvider::granule_size`]) is `unit`.
    pub fn new(config: ExpandableConfig, unit: usize) -> Self {
        debug_assert!(unit.is_power_of_two());
        Expandable {
            base_policy: config.granules,
            expected: 0,
            config,
            unit,
            shift: unit.trailing_zeros(),
            segments: Vec::new(),
            pool: vec![Vec::new(); CLASSES],
            pooled_bytes: 0,
            held: 0,
            created: vec![0; CLASSES],
            plan: Vec::new(),
            scratch: Vec::new(),
            bases: Vec::new(),
            counters: VmCounters::default(),
        }
    }

    /// The provider's granule: the unit every piece is a power-of-two multiple of.
    pub fn granule(&self) -> usize {
        self.unit
    }

    /// The piece-size policy in effect.
    pub fn policy(&self) -> GranulePolicy {
        self.config.granules
    }

    /// Applies a scale hint: the policy from now on is [`GranulePolicy::expecting`] the
    /// largest peak hinted so far.
    pub fn expect_peak(&mut self, peak: usize) {
        self.expected = self.expected.max(peak);
        self.config.granules = self.base_policy.expecting(self.expected);
    }

    /// Pieces created so far, by size in bytes (ascending), sizes never created left out.
    pub fn created_sizes(&self) -> Vec<(usize, u64)> {
        (0..CLASSES)
            .filter(|&c| self.created[c] > 0)
            .map(|c| (self.unit << c, self.created[c]))
            .collect()
    }

    /// Calls and bytes so far.
    pub fn counters(&self) -> VmCounters {
        self.counters
    }

    /// Reserves a new segment of at least `min_size` bytes (and at least `segment_size`),
    /// aligned to the largest piece the policy may create; the caller adds it to the TLSF and
    /// registers it with [`Expandable::insert`].
    pub fn reserve(
        &mut self,
        provider: &mut dyn BlockProvider,
        min_size: usize,
    ) -> Result<VirtualRange, MemError> {
        let size = crate::align::round_size(min_size.max(self.config.segment_size), self.unit)?;
        let range = provider.reserve_virtual(size)?;
        if range.addr % self.unit != 0 || range.size % self.unit != 0 {
            let requested = range.size;
            provider.release_virtual(range);
            return Err(MemError::ProviderFailed {
                device: provider.name().to_string(),
                requested,
                reason: "virtual range not aligned to the granule".to_string(),
            });
        }
        Ok(range)
    }

    /// Registers a reserved range as the segment of TLSF region `region`.
    pub fn insert(&mut self, region: RegionId, range: VirtualRange) {
        let idx = region as usize;
        if self.segments.len() <= idx {
            self.segments.resize_with(idx + 1, || None);
        }
        self.segments[idx] = Some(Segment::new(range, self.shift));
    }

    fn span(&self, seg: &Segment, addr: usize, size: usize) -> (usize, usize) {
        let off = addr - seg.range.addr;
        (off >> self.shift, (off + size.max(1) - 1) >> self.shift)
    }

    /// Makes `[addr, addr + size)` of region `region` mapped, pulling physical pieces from the
    /// pool, then from the highest cached pieces, then from the provider.
    ///
    /// On error some units of the range may be mapped and marked needed; the caller frees
    /// the range through [`Expandable::on_free`], which makes their pieces cached again.
    pub fn on_alloc(
        &mut self,
        provider: &mut dyn BlockProvider,
        stats: &mut Stats,
        region: RegionId,
        addr: usize,
        size: usize,
    ) -> Result<(), MemError> {
        let mut seg = self.segments[region as usize]
            .take()
            .expect("expandable: allocation outside a segment");
        let result = self.map_span(provider, stats, &mut seg, region, addr, size);
        self.segments[region as usize] = Some(seg);
        result
    }

    fn map_span(
        &mut self,
        provider: &mut dyn BlockProvider,
        stats: &mut Stats,
        seg: &mut Segment,
        region: RegionId,
        addr: usize,
        size: usize,
    ) -> Result<(), MemError> {
        let (first, last) = self.span(seg, addr, size);
        seg.cover(last + 1);
        let mut missing = false;
        for u in first..=last {
            if seg.needed[u] {
                missing |= seg.owner[u] == NONE;
            } else {
                missing |= !seg.need(u);
            }
        }
        if !missing {
            return Ok(());
        }
        let budget = stats
            .peak_bytes_in_use
            .max(stats.bytes_in_use + size)
            .saturating_mul(1000 + self.config.headroom_permille as usize)
            / 1000;
        let mut plan = std::mem::take(&mut self.plan);
        plan.clear();
        let mut result = Ok(());
        let mut u = first;
        while u <= last {
            if seg.owner[u] != NONE {
                u += 1;
                continue;
            }
            match self.pick(provider, stats, seg, region, (u, last), budget) {
                Ok((class, granule)) => {
                    let n = 1usize << class;
                    let base = u & !(n - 1);
                    seg.cover(base + n);
                    seg.owner[base..base + n].fill(PLANNED);
                    plan.push((base, granule, class));
                    u = base + n;
                }
                Err(err) => {
                    result = Err(err);
                    break;
                }
            }
        }
        // Map the plan, one call per run of adjacent pieces.
        let mut i = 0;
        let mut handles = std::mem::take(&mut self.scratch);
        while result.is_ok() && i < plan.len() {
            handles.clear();
            let start = plan[i].0;
            let mut end = start;
            let mut j = i;
            while j < plan.len() && plan[j].0 == end {
                end += 1 << plan[j].2;
                handles.push(plan[j].1);
                j += 1;
            }
            if let Err(err) = provider.map(&seg.range, start << self.shift, &handles) {
                result = Err(err);
                break;
            }
            for &(base, granule, class) in &plan[i..j] {
                seg.install(base, granule, class);
                self.counters.mapped_bytes += granule.size;
            }
            self.counters.map_calls += 1;
            self.counters.granules_mapped += (j - i) as u64;
            i = j;
        }
        // What was not mapped goes back to the pool.
        for &(base, granule, class) in &plan[i..] {
            seg.owner[base..base + (1 << class)].fill(NONE);
            self.pooled_bytes += granule.size;
            self.pool[class as usize].push(granule);
        }
        self.counters.peak_mapped_bytes = self
            .counters
            .peak_mapped_bytes
            .max(self.counters.mapped_bytes);
        self.scratch = handles;
        self.plan = plan;
        result
    }

    /// A physical piece for unmapped unit `u` (of a span ending at unit `last`) and its class:
    /// the largest pooled piece that fits around `u`, else (when holding one more piece would
    /// pass `budget` bytes) the largest cached piece that fits, unmapped where it was, else a
    /// new piece of the policy's size (or less, if that would not fit around `u` or the
    /// provider refuses it: halved down to one unit before the error is returned).
    #[allow(clippy::too_many_arguments)]
    fn pick(
        &mut self,
        provider: &mut dyn BlockProvider,
        stats: &mut Stats,
        seg: &mut Segment,
        region: RegionId,
        (u, last): (usize, usize),
        budget: usize,
    ) -> Result<(u8, PhysicalGranule), MemError> {
        let target = (self.config.granules.piece_size(self.held, self.unit) >> self.shift)
            .trailing_zeros() as usize;
        let top_free = (0..CLASSES)
            .rev()
            .find(|&c| {
                !self.pool[c].is_empty()
                    || !seg.cached[c].is_empty()
                    || self
                        .segments
                        .iter()
                        .flatten()
                        .any(|s| !s.cached[c].is_empty())
            })
            .unwrap_or(0);
        // Fitted to the request: the largest class allowed and the cap from the peak in use.
        let fitted = match self.config.granules {
            GranulePolicy::Spanning {
                max_bytes,
                peak_divisor,
                ..
            } => {
                let cap = (budget / peak_divisor.max(1)).min(max_bytes) >> self.shift;
                Some(floor_log2(cap).max(target))
            }
            _ => None,
        };
        let limit = target.max(top_free).max(fitted.unwrap_or(0));
        let fit = seg.free_class_at(u, limit.min(CLASSES - 1));
        for c in (0..=fit.min(target.max(top_free))).rev() {
            if let Some(granule) = self.pool[c].pop() {
                self.pooled_bytes -= granule.size;
                return Ok((c as u8, granule));
            }
        }
        let create = match fitted {
            Some(cap) => fitted_class(u, last, fit.min(cap), target),
            None => target.min(fit),
        };
        // Over the budget, or (fitted pieces) where the free span's alignment allows only a piece
        // smaller than the policy's: a cached piece moved costs no creation. Without the second
        // case a large request after a small piece climbs the alignment with pieces of 1, 2, 4,
        // ... units (the 13B-class trace: 253 creations instead of 87).
        if self.held + (self.unit << create) > budget || (fitted.is_some() && create < target) {
            // With one piece size, take what the rest of the span needs at once (one unmap call
            // per run). With mixed sizes one at a time: pieces taken ahead wait in the pool and
            // sat idle where the span then needed other sizes (llama8b-flash-seqvar: 1.042
            // instead of 1.032).
            let single = matches!(
                self.config.granules,
                GranulePolicy::Provider | GranulePolicy::Fixed { .. }
            );
            for c in (0..=fit).rev() {
                // Pieces of one size sit aligned, so a block is unmapped iff its first unit is.
                let want = if single {
                    let n = 1usize << c;
                    (u & !(n - 1)..=last)
                        .step_by(n)
                        .filter(|&b| seg.owner_of(b) == NONE)
                        .count()
                } else {
                    1
                };
                if self.steal(provider, seg, region, c, want) {
                    let granule = self.pool[c].pop().expect("stolen pieces are pooled");
                    self.pooled_bytes -= granule.size;
                    return Ok((c as u8, granule));
                }
            }
        }
        // A device too full for the policy's piece may still have room for a smaller one.
        let mut create = create;
        loop {
            let bytes = self.unit << create;
            match provider.create_physical(bytes) {
                Ok(granule) => {
                    self.counters.creates += 1;
                    self.created[create] += 1;
                    self.held += bytes;
                    stats.on_reserve(bytes);
                    return Ok((create as u8, granule));
                }
                Err(err) if create == 0 => return Err(err),
                Err(_) => create -= 1,
            }
        }
    }

    /// Unmaps up to `want` of the highest cached pieces of class `class` (of `seg`, the segment
    /// being mapped, else of another one) into the pool. Whether there was one.
    fn steal(
        &mut self,
        provider: &mut dyn BlockProvider,
        seg: &mut Segment,
        region: RegionId,
        class: usize,
        want: usize,
    ) -> bool {
        let Expandable {
            segments,
            pool,
            pooled_bytes,
            counters,
            bases,
            shift,
            ..
        } = self;
        let victim = if !seg.cached[class].is_empty() {
            seg
        } else {
            match segments
                .iter_mut()
                .enumerate()
                .filter(|(idx, _)| *idx != region as usize)
                .find_map(|(_, s)| s.as_mut().filter(|s| !s.cached[class].is_empty()))
            {
                Some(other) => other,
                None => return false,
            }
        };
        bases.clear();
        while bases.len() < want.max(1) {
            let Some(base) = victim.cached[class].pop_last() else {
                break;
            };
            victim.cached_units -= 1 << class;
            bases.push(base);
        }
        unmap_bases(
            provider,
            counters,
            *shift,
            victim,
            bases,
            pool,
            pooled_bytes,
        );
        true
    }

    /// Marks the units a free made wholly free as not needed (their pieces may become cached),
    /// then applies the cache limits.
    pub fn on_free(&mut self, provider: &mut dyn BlockProvider, stats: &mut Stats, freed: Freed) {
        let Some(seg) = self.segments[freed.region as usize].as_mut() else {
            return;
        };
        let base = seg.range.addr;
        let (first, last) = {
            let off = freed.addr - base;
            (
                off >> self.shift,
                (off + freed.size.max(1) - 1) >> self.shift,
            )
        };
        let lo = (freed.merged_addr - base).div_ceil(self.unit).max(first);
        let end = (freed.merged_addr + freed.merged_size - base) >> self.shift;
        let hi = end.min(last + 1).min(seg.needed.len());
        for u in lo..hi {
            if seg.needed[u] {
                seg.release(u);
            }
        }
        self.enforce_limits(provider, stats);
    }

    /// Unmaps cached pieces beyond `max_cached_bytes` (highest first) and releases pooled ones
    /// beyond `max_pooled_bytes` (largest first).
    fn enforce_limits(&mut self, provider: &mut dyn BlockProvider, stats: &mut Stats) {
        if self.config.max_cached_bytes != usize::MAX {
            let Expandable {
                segments,
                pool,
                pooled_bytes,
                counters,
                bases,
                shift,
                ..
            } = self;
            let mut cached: usize = segments
                .iter()
                .flatten()
                .map(|s| s.cached_units << *shift)
                .sum();
            for seg in segments.iter_mut().flatten() {
                bases.clear();
                while cached > self.config.max_cached_bytes {
                    let Some(base) = seg.take_highest_cached() else {
                        break;
                    };
                    cached -= seg.pieces[seg.owner[base] as usize].granule.size;
                    bases.push(base);
                }
                unmap_bases(provider, counters, *shift, seg, bases, pool, pooled_bytes);
            }
        }
        let mut class = CLASSES;
        while self.pooled_bytes > self.config.max_pooled_bytes && class > 0 {
            match self.pool[class - 1].pop() {
                Some(granule) => self.release_physical(provider, stats, granule),
                None => class -= 1,
            }
        }
    }

    fn release_physical(
        &mut self,
        provider: &mut dyn BlockProvider,
        stats: &mut Stats,
        granule: PhysicalGranule,
    ) {
        let bytes = granule.size;
        provider.release_physical(granule);
        self.counters.releases += 1;
        self.pooled_bytes -= bytes;
        self.held -= bytes;
        stats.on_unreserve(bytes);
    }

    /// Unmaps every cached piece and releases every pooled one. Returns the bytes released.
    pub fn trim(&mut self, provider: &mut dyn BlockProvider, stats: &mut Stats) -> usize {
        {
            let Expandable {
                segments,
                pool,
                pooled_bytes,
                counters,
                bases,
                shift,
                ..
            } = self;
            for seg in segments.iter_mut().flatten() {
                bases.clear();
                while let Some(base) = seg.take_highest_cached() {
                    bases.push(base);
                }
                unmap_bases(provider, counters, *shift, seg, bases, pool, pooled_bytes);
            }
        }
        let released = self.pooled_bytes;
        for class in 0..CLASSES {
            while let Some(granule) = self.pool[class].pop() {
                self.release_physical(provider, stats, granule);
            }
        }
        released
    }

    /// TLSF regions that are segments.
    pub fn regions(&self) -> Vec<RegionId> {
        (0..self.segments.len())
            .filter(|&r| self.segments[r].is_some())
            .map(|r| r as RegionId)
            .collect()
    }

    /// Whether region `region` is a segment with nothing mapped (so it can be released).
    pub fn is_unmapped(&self, region: RegionId) -> bool {
        self.segments
            .get(region as usize)
            .and_then(Option::as_ref)
            .is_some_and(|s| s.mapped_units == 0)
    }

    /// Gives back the virtual range of an unmapped segment.
    pub fn release_segment(&mut self, provider: &mut dyn BlockProvider, region: RegionId) {
        if let Some(seg) = self.segments[region as usize].take() {
            debug_assert_eq!(seg.mapped_units, 0);
            provider.release_virtual(seg.range);
        }
    }

    /// Unmaps and releases everything, live allocations or not (the allocator is dropped).
    pub fn release_all(&mut self, provider: &mut dyn BlockProvider) {
        let mut counters = self.counters;
        for mut seg in self.segments.iter_mut().filter_map(Option::take) {
            let mut bases: Vec<usize> = seg
                .pieces
                .iter_mut()
                .filter(|p| p.base != usize::MAX)
                .map(|p| {
                    p.busy = 0;
                    p.base
                })
                .collect();
            unmap_bases(
                provider,
                &mut counters,
                self.shift,
                &mut seg,
                &mut bases,
                &mut self.pool,
                &mut self.pooled_bytes,
            );
            provider.release_virtual(seg.range);
        }
        for class in 0..CLASSES {
            for granule in std::mem::take(&mut self.pool[class]) {
                provider.release_physical(granule);
            }
        }
        self.pooled_bytes = 0;
    }

    /// Checks the unit and piece states against the busy ranges of the TLSF; used by tests.
    #[cfg(test)]
    pub fn check(&self, busy: &[(usize, usize)]) {
        let mut held = self.pooled_bytes;
        let pooled: usize = self.pool.iter().flatten().map(|g| g.size).sum();
        assert_eq!(pooled, self.pooled_bytes);
        for (c, pieces) in self.pool.iter().enumerate() {
            assert!(pieces.iter().all(|g| g.size == self.unit << c));
        }
        let mut mapped_bytes = 0;
        for seg in self.segments.iter().flatten() {
            let base = seg.range.addr;
            let end = base + seg.range.size;
            let mut needed = vec![false; seg.needed.len()];
            for &(addr, size) in busy.iter().filter(|&&(a, _)| a >= base && a < end) {
                let (first, last) = self.span(seg, addr, size);
                for flag in &mut needed[first..=last] {
                    *flag = true;
                }
            }
            assert_eq!(needed, seg.needed, "needed units");
            let (mut mapped, mut cached) = (0, 0);
            for (slot, piece) in seg.pieces.iter().enumerate() {
                if piece.base == usize::MAX {
                    assert!(seg.free_slots.contains(&(slot as u32)));
                    continue;
                }
                let n = 1usize << piece.class;
                assert_eq!(piece.base % n, 0, "piece aligned to its size");
                assert_eq!(piece.granule.size, self.unit << piece.class);
                assert!(piece.base + n <= seg.units);
                assert!(seg.owner[piece.base..piece.base + n]
                    .iter()
                    .all(|&o| o == slot as u32));
                let busy = seg.needed[piece.base..piece.base + n]
                    .iter()
                    .filter(|&&b| b)
                    .count();
                assert_eq!(piece.busy as usize, busy, "busy units of a piece");
                assert_eq!(
                    seg.cached[piece.class as usize].contains(&piece.base),
                    busy == 0,
                    "cached iff no unit needed"
                );
                mapped += n;
                cached += if busy == 0 { n } else { 0 };
                held += piece.granule.size;
                mapped_bytes += piece.granule.size;
            }
            let owned = seg.owner.iter().filter(|&&o| o != NONE).count();
            assert_eq!(owned, mapped, "no unit left planned or stale");
            for (u, &flag) in seg.needed.iter().enumerate() {
                assert!(!flag || seg.owner[u] != NONE, "needed unit {u} unmapped");
            }
            let in_sets: usize = (0..CLASSES).map(|c| seg.cached[c].len() << c).sum();
            assert_eq!(
                (mapped, cached, in_sets),
                (seg.mapped_units, seg.cached_units, cached)
            );
        }
        assert_eq!(mapped_bytes, self.counters.mapped_bytes);
        assert_eq!(held, self.held, "held = mapped + pooled");
        let created: usize = self
            .created_sizes()
            .iter()
            .map(|&(s, n)| s * n as usize)
            .sum();
        assert!(created >= self.held);
    }
}
