//! Trace replay: run an allocation trace through the sub-allocator (over host memory or a
//! simulated device) to measure fragmentation, provider calls and speed, and through the system
//! allocator for a speed ratio measured in the same run.

use std::alloc::Layout;
use std::fmt;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::expandable::{ExpandableConfig, GranulePolicy};
use crate::pool::{Allocation, AllocatorConfig, SubAllocator};
use crate::provider::{BlockProvider, CountingProvider, HostProvider};
use crate::stats::human_bytes;
use crate::tlsf::UNIT;
use crate::trace::{read_trace, Trace, TraceError, TraceEvent};

/// Which provider a replay runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderChoice {
    /// Host memory when the trace's peak fits in half the available RAM, else simulated.
    #[default]
    Auto,
    /// Real host memory (never touched by the replay).
    Host,
    /// The counting provider: fake addresses, for traces larger than RAM.
    Counting,
}

/// How an expandable replay sizes its physical pieces when no fixed granule is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GranuleRule {
    /// Online (the default): [`GranulePolicy::online`] over the provider's 2 MiB granules;
    /// pieces grow with the memory held, nothing about the trace is known in advance.
    #[default]
    Online,
    /// Any piece policy over the provider's 2 MiB granules.
    Policy(GranulePolicy),
    /// One granule from the trace's own peak ([`default_granule`]): an oracle a live runtime
    /// does not have, kept for comparison.
    Peak,
}

/// Knobs of a replay; the defaults are what `rlx mem replay` uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Pool block size; `None` picks one from the trace's scale (1/32 of its peak, 2 MiB..1 GiB).
    pub block_size: Option<usize>,
    /// Requests above this go to dedicated blocks; `None` is the allocator's default.
    pub dedicated_threshold: Option<usize>,
    /// Which provider to replay over.
    pub provider: ProviderChoice,
    /// Grow blocks in place when the provider can.
    pub grow_in_place: bool,
    /// Timed replays; the report gives the median.
    pub runs: usize,
    /// Also replay through the system allocator for the speed ratio.
    pub compare_system: bool,
    /// Expandable segments (virtual range, physical granules mapped on demand) instead of
    /// blocks. A block option (`block_size`, `dedicated_threshold`, `grow_in_place: false`)
    /// selects block mode even when this is set, so callers that only knew blocks keep them.
    pub expandable: bool,
    /// Fixed physical granule of the expandable mode (every piece this size); `None` follows
    /// `granule_rule`.
    pub granule: Option<usize>,
    /// Expandable mode without a fixed `granule`: how pieces are sized.
    pub granule_rule: GranuleRule,
    /// Expandable mode: most bytes of free granules kept mapped; `None` keeps all (no limit).
    pub max_cached_bytes: Option<usize>,
    /// Expandable mode: [`ExpandableConfig::headroom_permille`].
    pub headroom_permille: u32,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            block_size: None,
            dedicated_threshold: None,
            provider: ProviderChoice::Auto,
            grow_in_place: true,
            runs: 3,
            compare_system: true,
            expandable: true,
            granule: None,
            granule_rule: GranuleRule::Online,
            max_cached_bytes: None,
            headroom_permille: 0,
        }
    }
}

/// What a replay measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    /// The trace file.
    pub trace: String,
    /// Provider used (`host` or `counting`).
    pub provider: String,
    /// `expandable` (virtual segment, granules mapped on demand) or `blocks`.
    pub mode: String,
    /// Expandable mode: the provider's granule (every physical piece is a power-of-two
    /// multiple of it; with a fixed granule, that size).
    pub granule: Option<usize>,
    /// Expandable mode: how pieces were sized (`online, fitted to requests: ...`, `provider
    /// granule`, ...).
    pub granule_policy: Option<String>,
    /// Expandable mode: physical pieces created, as (bytes, count) by ascending size.
    pub granules_created: Vec<(usize, u64)>,
    /// Alloc and free events replayed.
    pub events: usize,
    /// Pool block size used.
    pub block_size: usize,
    /// Dedicated threshold in effect; `None` when nothing goes to dedicated blocks.
    pub dedicated_threshold: Option<usize>,
    /// Most bytes live at once (the lower bound on reserved memory).
    pub peak_live_bytes: usize,
    /// Most bytes held from the provider at once (expandable mode: physical granules held,
    /// mapped or pooled).
    pub peak_reserved_bytes: usize,
    /// `peak_reserved_bytes / peak_live_bytes`.
    pub fragmentation: f64,
    /// Provider calls that obtained memory: new blocks plus in-place growths; in expandable
    /// mode virtual reservations plus physical granule creations.
    pub provider_allocs: u64,
    /// New blocks among `provider_allocs`.
    pub provider_block_allocs: u64,
    /// In-place growths among `provider_allocs`.
    pub provider_grows: u64,
    /// Blocks returned to the provider during the replay.
    pub provider_frees: u64,
    /// Expandable mode: physical pieces created (of any size).
    pub physical_creates: u64,
    /// Expandable mode: physical granules released during the replay.
    pub physical_releases: u64,
    /// Expandable mode: map calls (each maps a run of adjacent pieces).
    pub map_calls: u64,
    /// Expandable mode: pieces mapped by those calls.
    pub granules_mapped: u64,
    /// Expandable mode: unmap calls (each unmaps a run of adjacent pieces).
    pub unmap_calls: u64,
    /// Expandable mode: most bytes mapped at once.
    pub peak_mapped_bytes: usize,
    /// Median over the timed replays of nanoseconds per event.
    pub ns_per_event: f64,
    /// Same for the system allocator (`std::alloc`), when measured.
    pub system_ns_per_event: Option<f64>,
    /// `system_ns_per_event / ns_per_event`: above 1 means the sub-allocator is faster.
    pub speedup_vs_system: Option<f64>,
    /// Timed replays behind each median.
    pub runs: usize,
    /// Allocations the trace never freed (freed after timing).
    pub unfreed_at_end: usize,
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let threshold = self
            .dedicated_threshold
            .map_or("none".to_string(), human_bytes);
        writeln!(f, "trace          {} ({} events)", self.trace, self.events)?;
        match self.granule {
            Some(granule) => {
                let created: Vec<String> = self
                    .granules_created
                    .iter()
                    .map(|&(size, n)| format!("{n} x {}", human_bytes(size)))
                    .collect();
                writeln!(
                    f,
                    "allocator      {} provider, expandable segment, granule {}, pieces {} \
                     (created: {})",
                    self.provider,
                    human_bytes(granule),
                    self.granule_policy.as_deref().unwrap_or("provider granule"),
                    created.join(", ")
                )?
            }
            None => writeln!(
                f,
                "allocator      {} provider, blocks of {}, dedicated above {}",
                self.provider,
                human_bytes(self.block_size),
                threshold
            )?,
        }
        writeln!(
            f,
            "memory         peak live {}, peak reserved {}, fragmentation {:.3}",
            human_bytes(self.peak_live_bytes),
            human_bytes(self.peak_reserved_bytes),
            self.fragmentation
        )?;
        if self.granule.is_some() {
            writeln!(
                f,
                "provider calls {} allocations ({} reservations + {} physical granules created), \
                 {} granules released",
                self.provider_allocs,
                self.provider_block_allocs,
                self.physical_creates,
                self.physical_releases
            )?;
            let over = if self.map_calls + self.unmap_calls > 100 {
                " -- more than 100 map/unmap calls"
            } else {
                ""
            };
            writeln!(
                f,
                "mapping        {} map calls ({} granules), {} unmap calls, peak mapped {}{over}",
                self.map_calls,
                self.granules_mapped,
                self.unmap_calls,
                human_bytes(self.peak_mapped_bytes)
            )?;
        } else {
            writeln!(
                f,
                "provider calls {} allocations ({} blocks + {} grows), {} frees",
                self.provider_allocs,
                self.provider_block_allocs,
                self.provider_grows,
                self.provider_frees
            )?;
        }
        write!(
            f,
            "speed          {:.1} ns/event (median of {})",
            self.ns_per_event, self.runs
        )?;
        if let (Some(sys), Some(ratio)) = (self.system_ns_per_event, self.speedup_vs_system) {
            write!(f, "; system allocator {sys:.1} ns/event, {ratio:.2}x")?;
        }
        Ok(())
    }
}

/// Reads a trace and replays it. The one call behind `rlx mem replay`.
///
/// # Errors
/// [`TraceError`] for an unreadable or malformed trace, or an allocator failure.
pub fn replay_file(path: &Path, opts: &ReplayOptions) -> Result<ReplayReport, TraceError> {
    let trace = read_trace(path)?;
    replay_trace(&trace, opts)
}

/// Replays `source`: a trace file, or `gen:NAME` for a trace generated in memory
/// ([`crate::TraceSpec::preset`]: `gen:0.5b-long-decode`, `gen:8b`, `gen:8b-mixed-batch`,
/// `gen:13b`).
///
/// # Errors
/// [`TraceError`] for an unknown preset, an unreadable or malformed trace, or an allocator
/// failure.
pub fn replay_source(source: &Path, opts: &ReplayOptions) -> Result<ReplayReport, TraceError> {
    match source.to_str().and_then(|p| p.strip_prefix("gen:")) {
        Some(name) => {
            let spec = crate::TraceSpec::preset(name).ok_or_else(|| TraceError::Io {
                path: format!("gen:{name}"),
                message: "no such generated trace (0.5b-long-decode, 8b, 8b-mixed-batch, 13b)"
                    .into(),
            })?;
            replay_trace(&spec.generate(), opts)
        }
        None => replay_file(source, opts),
    }
}

/// The peak-based granule ([`GranuleRule::Peak`], the default before the online policy): the
/// smallest power of two of at least 1/100 of the trace's peak (so about 100 physical granules
/// hold the peak), 2 MiB..1 GiB. It needs the peak in advance, which a live runtime does not
/// know; [`GranulePolicy::online`] gets there without it.
pub fn default_granule(peak_live_bytes: usize) -> usize {
    (peak_live_bytes / 100)
        .next_power_of_two()
        .clamp(2 << 20, 1 << 30)
}

/// The block size a replay uses by default: 1/32 of the trace's peak, a power of two in 2 MiB..1 GiB.
pub fn default_block_size(peak_live_bytes: usize) -> usize {
    (peak_live_bytes / 32)
        .next_power_of_two()
        .clamp(2 << 20, 1 << 30)
}

fn available_ram() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

fn make_provider(
    choice: ProviderChoice,
    peak: usize,
    granule: Option<usize>,
) -> Box<dyn BlockProvider> {
    let host = match choice {
        ProviderChoice::Host => true,
        ProviderChoice::Counting => false,
        ProviderChoice::Auto => available_ram().is_some_and(|ram| peak <= ram / 2),
    };
    match (host, granule) {
        (true, Some(g)) => Box::new(HostProvider::new().with_granule(g)),
        (true, None) => Box::new(HostProvider::new()),
        (false, Some(g)) => Box::new(CountingProvider::new().with_granule(g)),
        (false, None) => Box::new(CountingProvider::new()),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Whether a replay runs in expandable mode: asked for, and no block option given.
fn expandable(opts: &ReplayOptions) -> bool {
    opts.expandable
        && opts.grow_in_place
        && opts.block_size.is_none()
        && opts.dedicated_threshold.is_none()
}

/// Replays a parsed trace `opts.runs` times through fresh sub-allocators; parsing is not timed.
///
/// # Errors
/// [`TraceError::Mem`] when the allocator fails (the provider ran out of memory).
pub fn replay_trace(trace: &Trace, opts: &ReplayOptions) -> Result<ReplayReport, TraceError> {
    let granule = match (opts.granule, opts.granule_rule) {
        (Some(g), _) => Some(g),
        (None, GranuleRule::Peak) => Some(default_granule(trace.peak_live_bytes)),
        // The provider's own granule (2 MiB); the policy sizes the pieces.
        (None, _) => None,
    }
    .filter(|_| opts.expandable);
    let make = || make_provider(opts.provider, trace.peak_live_bytes, granule);
    replay_trace_on(trace, opts, &make)
}

/// [`replay_trace`] over providers `make` creates (one per replay): a device's own provider,
/// for instance, to replay a trace on real device memory. The provider's granule is used as
/// is (`opts.granule` and the peak rule only size the host and counting providers).
///
/// # Errors
/// [`TraceError::Mem`] when the allocator fails (the provider ran out of memory).
pub fn replay_trace_on(
    trace: &Trace,
    opts: &ReplayOptions,
    make: &dyn Fn() -> Box<dyn BlockProvider>,
) -> Result<ReplayReport, TraceError> {
    let config = AllocatorConfig {
        block_size: opts
            .block_size
            .unwrap_or_else(|| default_block_size(trace.peak_live_bytes)),
        dedicated_threshold: opts.dedicated_threshold,
        grow_in_place: opts.grow_in_place,
        expandable: expandable(opts).then(|| ExpandableConfig {
            max_cached_bytes: opts.max_cached_bytes.unwrap_or(usize::MAX),
            headroom_permille: opts.headroom_permille,
            granules: match (opts.granule, opts.granule_rule) {
                (None, GranuleRule::Online) => GranulePolicy::online(),
                (None, GranuleRule::Policy(policy)) => policy,
                // The provider's granule is the fixed (or peak-based) size itself.
                (Some(_), _) | (None, GranuleRule::Peak) => GranulePolicy::Provider,
            },
            ..ExpandableConfig::default()
        }),
        ..AllocatorConfig::default()
    };
    let runs = opts.runs.max(1);
    let first = replay_once(trace, &config, make())?;
    let mut times = vec![first.ns_per_event];
    for _ in 1..runs {
        times.push(replay_once(trace, &config, make())?.ns_per_event);
    }
    let ns_per_event = median(times);
    let stats = first.stats;
    let system = opts.compare_system.then(|| replay_system(trace, runs));
    let threshold = first.dedicated_threshold;
    Ok(ReplayReport {
        trace: trace.source.clone(),
        provider: first.provider,
        mode: if first.granule.is_some() {
            "expandable"
        } else {
            "blocks"
        }
        .to_string(),
        granule: first.granule,
        granule_policy: first.policy.map(|p| p.to_string()),
        granules_created: first.created,
        events: trace.events.len(),
        block_size: first.block_size,
        dedicated_threshold: (threshold != usize::MAX).then_some(threshold),
        peak_live_bytes: trace.peak_live_bytes,
        peak_reserved_bytes: stats.peak_bytes_reserved,
        fragmentation: crate::Stats::fragmentation_of(
            stats.peak_bytes_reserved,
            trace.peak_live_bytes,
        ),
        provider_allocs: stats.provider_allocs + stats.provider_grows + stats.physical_creates,
        provider_block_allocs: stats.provider_allocs,
        provider_grows: stats.provider_grows,
        provider_frees: stats.provider_frees,
        physical_creates: stats.physical_creates,
        physical_releases: stats.physical_releases,
        map_calls: stats.map_calls,
        granules_mapped: stats.granules_mapped,
        unmap_calls: stats.unmap_calls,
        peak_mapped_bytes: stats.peak_bytes_mapped,
        ns_per_event,
        system_ns_per_event: system,
        speedup_vs_system: system.map(|sys| sys / ns_per_event.max(f64::MIN_POSITIVE)),
        runs,
        unfreed_at_end: trace.unfreed,
    })
}

/// What one timed replay through a fresh sub-allocator measured.
struct Run {
    ns_per_event: f64,
    stats: crate::Stats,
    provider: String,
    block_size: usize,
    dedicated_threshold: usize,
    granule: Option<usize>,
    policy: Option<GranulePolicy>,
    created: Vec<(usize, u64)>,
}

fn replay_once(
    trace: &Trace,
    config: &AllocatorConfig,
    provider: Box<dyn BlockProvider>,
) -> Result<Run, TraceError> {
    let mut allocator = SubAllocator::new(provider, config.clone());
    let mut live: Vec<Option<Allocation>> = Vec::new();
    live.resize_with(trace.slots, || None);
    let start = Instant::now();
    for event in &trace.events {
        match *event {
            TraceEvent::Alloc { slot, bytes } => {
                live[slot as usize] = Some(allocator.alloc(bytes, UNIT)?);
            }
            TraceEvent::Free { slot } => {
                if let Some(allocation) = live[slot as usize].take() {
                    allocator.free(allocation)?;
                }
            }
        }
    }
    let elapsed = start.elapsed().as_nanos() as f64;
    let stats = allocator.stats();
    let created = allocator.granules_created();
    for allocation in live.into_iter().flatten() {
        allocator.free(allocation)?;
    }
    Ok(Run {
        ns_per_event: elapsed / trace.events.len().max(1) as f64,
        stats,
        provider: allocator.provider().name().to_string(),
        block_size: allocator.config().block_size,
        dedicated_threshold: allocator.dedicated_threshold(),
        granule: allocator.granule_size(),
        policy: allocator.granule_policy(),
        created,
    })
}

/// Replays the trace through the system allocator (`std::alloc`, same sizes, 256-byte
/// alignment) `runs` times; returns the median nanoseconds per event.
pub fn replay_system(trace: &Trace, runs: usize) -> f64 {
    let mut times = Vec::with_capacity(runs.max(1));
    for _ in 0..runs.max(1) {
        let mut live: Vec<Option<(*mut u8, Layout)>> = vec![None; trace.slots];
        let start = Instant::now();
        for event in &trace.events {
            match *event {
                TraceEvent::Alloc { slot, bytes } => {
                    let Ok(layout) = Layout::from_size_align(bytes.max(1), UNIT) else {
                        continue;
                    };
                    // SAFETY: the layout has a non-zero size.
                    let ptr = unsafe { std::alloc::alloc(layout) };
                    if !ptr.is_null() {
                        live[slot as usize] = Some((ptr, layout));
                    }
                }
                TraceEvent::Free { slot } => {
                    if let Some((ptr, layout)) = live[slot as usize].take() {
                        // SAFETY: `ptr` came from `alloc` with this layout and is freed once.
                        unsafe { std::alloc::dealloc(ptr, layout) };
                    }
                }
            }
        }
        times.push(start.elapsed().as_nanos() as f64 / trace.events.len().max(1) as f64);
        for (ptr, layout) in live.into_iter().flatten() {
            // SAFETY: as above; these are the allocations the trace never freed.
            unsafe { std::alloc::dealloc(ptr, layout) };
        }
    }
    median(times)
}

#[cfg(test)]
mod tests;
