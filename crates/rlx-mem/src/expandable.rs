//! Expandable segments: the sub-allocator's ranges live in large virtual address ranges
//! (segments) and physical memory is mapped into them granule by granule, only where an
//! allocation needs it (CUDA `cuMemAddressReserve` + `cuMemCreate` + `cuMemMap`, as PyTorch's
//! `expandable_segments`; on the host `mmap(PROT_NONE)` plus `mprotect` / `madvise`).
//!
//! Per granule of a segment one state: unmapped, *cached* (mapped, but no live or pending range
//! overlaps it) or *needed*. An allocation maps the unmapped granules it covers; a free turns
//! the granules that became wholly free into cached ones. Cached granules stay mapped, so
//! alloc/free churn over the same addresses costs no provider call; when an allocation needs
//! granules elsewhere, physical granules come from, in order: the pool of unmapped physical
//! granules, the cached granule at the highest address (unmapped and mapped again at the new
//! place, as CUDA remaps a physical handle), and only then a new physical granule from the
//! provider. Highest address first because ranges are placed low (best fit, lowest address), so
//! the top of a segment is what the next allocations are least likely to reuse; taking the
//! least recently freed granule instead needed about twice the map calls on the shared traces.
//! So the physical memory held never exceeds the most granules ever needed at once, unless the
//! cache limits below release memory (then it can be less, at the price of more calls).

use serde::Serialize;

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
    /// Mapped granules that no allocation uses are kept mapped up to this many bytes; beyond,
    /// the highest ones are unmapped into the physical pool.
    pub max_cached_bytes: usize,
    /// Unmapped physical granules kept for remapping up to this many bytes; beyond, they are
    /// released to the provider.
    pub max_pooled_bytes: usize,
    /// Headroom, in thousandths of the peak bytes in use so far: while the physical memory held
    /// stays below that peak plus the headroom, a missing granule is created new rather than
    /// taken from a cached granule elsewhere (which costs an unmap and a map). 0 always remaps
    /// first, so physical memory never exceeds the most granules needed at once.
    pub headroom_permille: u32,
}

impl Default for ExpandableConfig {
    fn default() -> Self {
        ExpandableConfig {
            segment_size: 64 << 30,
            max_cached_bytes: usize::MAX,
            max_pooled_bytes: usize::MAX,
            headroom_permille: 0,
        }
    }
}

const UNMAPPED: u8 = 0;
const CACHED: u8 = 1;
const NEEDED: u8 = 2;

/// One virtual range and the state of its granules (vectors grow to the highest granule touched).
#[derive(Debug)]
struct Segment {
    range: VirtualRange,
    state: Vec<u8>,
    physical: Vec<u64>,
    /// One bit per cached granule, to find the highest one quickly.
    cached_bits: Vec<u64>,
    /// Word of `cached_bits` at or above which no bit is set.
    cached_top: usize,
    mapped: usize,
    cached: usize,
}

impl Segment {
    fn new(range: VirtualRange) -> Self {
        Segment {
            range,
            state: Vec::new(),
            physical: Vec::new(),
            cached_bits: Vec::new(),
            cached_top: 0,
            mapped: 0,
            cached: 0,
        }
    }

    fn cover(&mut self, granules: usize) {
        if self.state.len() < granules {
            self.state.resize(granules, UNMAPPED);
            self.physical.resize(granules, 0);
            self.cached_bits.resize(granules.div_ceil(64), 0);
        }
    }

    fn set_cached(&mut self, g: usize) {
        self.state[g] = CACHED;
        self.cached += 1;
        self.cached_bits[g / 64] |= 1 << (g % 64);
        self.cached_top = self.cached_top.max(g / 64 + 1);
    }

    /// Takes granule `g` out of the cached set; its new state is up to the caller.
    fn clear_cached(&mut self, g: usize) {
        self.cached -= 1;
        self.cached_bits[g / 64] &= !(1 << (g % 64));
    }

    /// The cached granule at the highest address.
    fn highest_cached(&mut self) -> Option<usize> {
        while self.cached_top > 0 {
            let word = self.cached_bits[self.cached_top - 1];
            if word != 0 {
                return Some((self.cached_top - 1) * 64 + 63 - word.leading_zeros() as usize);
            }
            self.cached_top -= 1;
        }
        None
    }
}

/// Counters of the expandable mode, folded into [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct VmCounters {
    pub creates: u64,
    pub releases: u64,
    pub map_calls: u64,
    pub unmap_calls: u64,
    pub granules_mapped: u64,
    pub granules_unmapped: u64,
    pub mapped_bytes: usize,
    pub peak_mapped_bytes: usize,
}

/// The segments of one sub-allocator and its pool of unmapped physical granules.
#[derive(Debug)]
pub(crate) struct Expandable {
    config: ExpandableConfig,
    granule: usize,
    shift: u32,
    segments: Vec<Option<Segment>>,
    pool: Vec<PhysicalGranule>,
    scratch: Vec<PhysicalGranule>,
    victims: Vec<usize>,
    counters: VmCounters,
}

impl Expandable {
    /// The mode over a provider whose granule ([`BlockProvider::granule_size`]) is `granule`.
    pub fn new(config: ExpandableConfig, granule: usize) -> Self {
        debug_assert!(granule.is_power_of_two());
        Expandable {
            config,
            granule,
            shift: granule.trailing_zeros(),
            segments: Vec::new(),
            pool: Vec::new(),
            scratch: Vec::new(),
            victims: Vec::new(),
            counters: VmCounters::default(),
        }
    }

    /// Granule in effect (the provider's).
    pub fn granule(&self) -> usize {
        self.granule
    }

    /// Calls and bytes so far.
    pub fn counters(&self) -> VmCounters {
        self.counters
    }

    /// Reserves a new segment of at least `min_size` bytes (and at least `segment_size`),
    /// granule aligned; the caller adds it to the TLSF and registers it with [`Expandable::insert`].
    pub fn reserve(
        &mut self,
        provider: &mut dyn BlockProvider,
        min_size: usize,
    ) -> Result<VirtualRange, MemError> {
        let size = crate::align::round_size(min_size.max(self.config.segment_size), self.granule)?;
        let range = provider.reserve_virtual(size)?;
        if range.addr % self.granule != 0 || range.size % self.granule != 0 {
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
        self.segments[idx] = Some(Segment::new(range));
    }

    fn span(&self, seg: &Segment, addr: usize, size: usize) -> (usize, usize) {
        let off = addr - seg.range.addr;
        (off >> self.shift, (off + size.max(1) - 1) >> self.shift)
    }

    /// Makes `[addr, addr + size)` of region `region` mapped, pulling physical granules from the
    /// pool, then from the highest cached granules, then from the provider.
    ///
    /// On error some granules of the range may be mapped and marked needed; the caller frees
    /// the range through [`Expandable::on_free`], which makes them cached again.
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
        let mut missing = 0;
        for g in first..=last {
            match seg.state[g] {
                CACHED => {
                    seg.clear_cached(g);
                    seg.state[g] = NEEDED;
                }
                UNMAPPED => missing += 1,
                _ => {}
            }
        }
        if missing == 0 {
            return Ok(());
        }
        let mut handles = std::mem::take(&mut self.scratch);
        handles.clear();
        let budget = stats
            .peak_bytes_in_use
            .max(stats.bytes_in_use + size)
            .saturating_mul(1000 + self.config.headroom_permille as usize)
            / 1000;
        let acquired = self.acquire(provider, stats, seg, region, missing, budget, &mut handles);
        if let Err(err) = acquired {
            self.pool.append(&mut handles);
            self.scratch = handles;
            return Err(err);
        }
        let mut used = 0;
        let mut g = first;
        let mut result = Ok(());
        while g <= last {
            if seg.state[g] != UNMAPPED {
                g += 1;
                continue;
            }
            let start = g;
            while g <= last && seg.state[g] == UNMAPPED {
                g += 1;
            }
            let run = g - start;
            let chunk = &handles[used..used + run];
            if let Err(err) = provider.map(&seg.range, start << self.shift, chunk) {
                result = Err(err);
                break;
            }
            for (k, h) in chunk.iter().enumerate() {
                seg.state[start + k] = NEEDED;
                seg.physical[start + k] = h.handle;
            }
            used += run;
            seg.mapped += run;
            self.counters.map_calls += 1;
            self.counters.granules_mapped += run as u64;
            self.counters.mapped_bytes += run * self.granule;
        }
        self.counters.peak_mapped_bytes = self
            .counters
            .peak_mapped_bytes
            .max(self.counters.mapped_bytes);
        self.pool.extend_from_slice(&handles[used..]);
        self.scratch = handles;
        result
    }

    /// Fills `out` with `count` unmapped physical granules: pooled ones, new ones while the
    /// physical memory held stays within `budget` bytes, cached ones unmapped elsewhere, and
    /// new ones again when nothing is cached.
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &mut self,
        provider: &mut dyn BlockProvider,
        stats: &mut Stats,
        seg: &mut Segment,
        region: RegionId,
        count: usize,
        budget: usize,
        out: &mut Vec<PhysicalGranule>,
    ) -> Result<(), MemError> {
        while out.len() < count {
            if let Some(h) = self.pool.pop() {
                out.push(h);
                continue;
            }
            let held = (self.counters.creates - self.counters.releases) as usize;
            let within = (held + 1) * self.granule <= budget;
            if !within && self.steal(provider, seg, region, count - out.len(), out) {
                continue;
            }
            let h = provider.create_physical()?;
            self.counters.creates += 1;
            stats.on_reserve(self.granule);
            out.push(h);
        }
        Ok(())
    }

    /// Unmaps up to `want` of the highest cached granules (of `seg`, the segment
    /// being mapped, else of another one) and pushes their physical granules to `out`.
    fn steal(
        &mut self,
        provider: &mut dyn BlockProvider,
        seg: &mut Segment,
        region: RegionId,
        want: usize,
        out: &mut Vec<PhysicalGranule>,
    ) -> bool {
        let mut victims = std::mem::take(&mut self.victims);
        let done = if seg.cached > 0 {
            Self::unmap_highest(
                provider,
                &mut self.counters,
                self.shift,
                seg,
                want,
                &mut victims,
                out,
            );
            true
        } else {
            let other = self
                .segments
                .iter_mut()
                .enumerate()
                .filter(|(idx, _)| *idx != region as usize)
                .find_map(|(_, s)| s.as_mut().filter(|s| s.cached > 0));
            match other {
                Some(other) => {
                    Self::unmap_highest(
                        provider,
                        &mut self.counters,
                        self.shift,
                        other,
                        want,
                        &mut victims,
                        out,
                    );
                    true
                }
                None => false,
            }
        };
        self.victims = victims;
        done
    }

    /// Unmaps up to `want` of the highest cached granules of `seg`, one call per run of
    /// consecutive granules, and pushes their physical granules to `out`.
    fn unmap_highest(
        provider: &mut dyn BlockProvider,
        counters: &mut VmCounters,
        shift: u32,
        seg: &mut Segment,
        want: usize,
        victims: &mut Vec<usize>,
        out: &mut Vec<PhysicalGranule>,
    ) {
        victims.clear();
        while victims.len() < want {
            let Some(g) = seg.highest_cached() else {
                break;
            };
            seg.clear_cached(g);
            seg.state[g] = UNMAPPED;
            victims.push(g);
        }
        victims.sort_unstable();
        let mut i = 0;
        while i < victims.len() {
            let start = victims[i];
            let mut run = 1;
            while i + run < victims.len() && victims[i + run] == start + run {
                run += 1;
            }
            provider.unmap(&seg.range, start << shift, run);
            for g in start..start + run {
                seg.state[g] = UNMAPPED;
                out.push(PhysicalGranule {
                    handle: seg.physical[g],
                });
            }
            seg.mapped -= run;
            counters.unmap_calls += 1;
            counters.granules_unmapped += run as u64;
            counters.mapped_bytes -= run << shift;
            i += run;
        }
    }

    /// Marks the granules a free made wholly free as cached, then applies the cache limits.
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
        let lo = (freed.merged_addr - base).div_ceil(self.granule).max(first);
        let end = (freed.merged_addr + freed.merged_size - base) >> self.shift;
        let hi = end.min(last + 1).min(seg.state.len());
        for g in lo..hi {
            if seg.state[g] == NEEDED {
                seg.set_cached(g);
            }
        }
        self.enforce_limits(provider, stats);
    }

    fn cached_bytes(&self) -> usize {
        self.segments
            .iter()
            .flatten()
            .map(|s| s.cached)
            .sum::<usize>()
            * self.granule
    }

    /// Unmaps cached granules beyond `max_cached_bytes` and releases pooled ones beyond
    /// `max_pooled_bytes`.
    fn enforce_limits(&mut self, provider: &mut dyn BlockProvider, stats: &mut Stats) {
        if self.config.max_cached_bytes != usize::MAX {
            let mut over = self
                .cached_bytes()
                .saturating_sub(self.config.max_cached_bytes)
                .div_ceil(self.granule);
            let mut pool = std::mem::take(&mut self.pool);
            let mut victims = std::mem::take(&mut self.victims);
            for seg in self.segments.iter_mut().flatten() {
                if over == 0 {
                    break;
                }
                let before = pool.len();
                Self::unmap_highest(
                    provider,
                    &mut self.counters,
                    self.shift,
                    seg,
                    over,
                    &mut victims,
                    &mut pool,
                );
                over -= pool.len() - before;
            }
            self.pool = pool;
            self.victims = victims;
        }
        let keep = self.config.max_pooled_bytes / self.granule;
        while self.pool.len() > keep {
            let h = self.pool.pop().expect("pool is longer than keep");
            self.release_physical(provider, stats, h);
        }
    }

    fn release_physical(
        &mut self,
        provider: &mut dyn BlockProvider,
        stats: &mut Stats,
        h: PhysicalGranule,
    ) {
        provider.release_physical(h);
        self.counters.releases += 1;
        stats.on_unreserve(self.granule);
    }

    /// Unmaps every cached granule and releases every pooled one. Returns the bytes released.
    pub fn trim(&mut self, provider: &mut dyn BlockProvider, stats: &mut Stats) -> usize {
        let mut pool = std::mem::take(&mut self.pool);
        let mut victims = std::mem::take(&mut self.victims);
        for seg in self.segments.iter_mut().flatten() {
            let all = seg.cached;
            Self::unmap_highest(
                provider,
                &mut self.counters,
                self.shift,
                seg,
                all,
                &mut victims,
                &mut pool,
            );
        }
        self.victims = victims;
        let released = pool.len() * self.granule;
        for h in pool {
            self.release_physical(provider, stats, h);
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
            .is_some_and(|s| s.mapped == 0)
    }

    /// Gives back the virtual range of an unmapped segment.
    pub fn release_segment(&mut self, provider: &mut dyn BlockProvider, region: RegionId) {
        if let Some(seg) = self.segments[region as usize].take() {
            debug_assert_eq!(seg.mapped, 0);
            provider.release_virtual(seg.range);
        }
    }

    /// Unmaps and releases everything, live allocations or not (the allocator is dropped).
    pub fn release_all(&mut self, provider: &mut dyn BlockProvider) {
        for seg in self.segments.iter_mut().filter_map(Option::take) {
            let mut g = 0;
            while g < seg.state.len() {
                if seg.state[g] == UNMAPPED {
                    g += 1;
                    continue;
                }
                let start = g;
                while g < seg.state.len() && seg.state[g] != UNMAPPED {
                    g += 1;
                }
                provider.unmap(&seg.range, start << self.shift, g - start);
                for k in start..g {
                    self.pool.push(PhysicalGranule {
                        handle: seg.physical[k],
                    });
                }
            }
            provider.release_virtual(seg.range);
        }
        for h in std::mem::take(&mut self.pool) {
            provider.release_physical(h);
        }
    }

    /// Checks the granule states against the busy ranges of the TLSF; used by tests.
    #[cfg(test)]
    pub fn check(&self, busy: &[(usize, usize)]) {
        for seg in self.segments.iter().flatten() {
            let base = seg.range.addr;
            let end = base + seg.range.size;
            let mut needed = vec![false; seg.state.len()];
            for &(addr, size) in busy.iter().filter(|&&(a, _)| a >= base && a < end) {
                let (first, last) = self.span(seg, addr, size);
                for flag in &mut needed[first..=last] {
                    *flag = true;
                }
            }
            let mut cached = 0;
            let mut mapped = 0;
            for (g, &state) in seg.state.iter().enumerate() {
                assert_eq!(state == NEEDED, needed[g], "granule {g} state {state}");
                cached += usize::from(state == CACHED);
                mapped += usize::from(state != UNMAPPED);
            }
            assert_eq!((cached, mapped), (seg.cached, seg.mapped));
            let walk: usize = seg
                .cached_bits
                .iter()
                .map(|w| w.count_ones() as usize)
                .sum();
            assert!(seg.cached_bits[seg.cached_top.min(seg.cached_bits.len())..]
                .iter()
                .all(|&w| w == 0));
            assert_eq!(walk, cached, "the cached bits mark every cached granule");
        }
    }
}
