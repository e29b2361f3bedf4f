//! rlx-mem: the unified memory layer of RLX, device independent above one small trait.
//!
//! Three layers, bottom up:
//! 1. **Block providers** ([`BlockProvider`]): one per device, handing out and taking back big
//!    raw blocks, and optionally virtual memory (reserve a range, map and unmap physical
//!    granules in it). [`HostProvider`] gives host memory (growable virtual reservations and
//!    `mmap`/`mprotect` granules on Linux), [`CountingProvider`] simulates a device with fake
//!    addresses to replay traces larger than RAM, [`TestProvider`] adds a capacity cap, failure
//!    injection, call counts and rule checks.
//! 2. **Sub-allocators** carving those blocks: [`SubAllocator`] (TLSF, O(1), alignment aware,
//!    dedicated blocks for large requests, in-place growth, empty-block release, stream-ordered
//!    reuse, out-of-memory recovery, or *expandable segments* ([`ExpandableConfig`]: one virtual
//!    range, physical granules mapped where allocations need them), [`LinearArena`] for per-run
//!    scratch and [`StagingRing`] for host<->device copies. All keep [`Stats`].
//! 3. The **static planner** ([`plan`]): with tensor lifetimes known at compile time, tensors
//!    are packed by offset into one arena, so a compiled graph makes one allocation.
//!
//! Allocation traces replay through layer 2 on the CPU ([`replay_file`]), which measures
//! fragmentation and speed without a GPU; [`TraceSpec`] generates traces of transformer
//! inference at any scale in memory, for tests and replays without trace files.

#![warn(missing_docs)]

mod align;
mod arena;
mod dedicated;
mod error;
mod expandable;
mod planner;
mod pool;
mod provider;
mod replay;
mod staging;
mod stats;
mod stream;
mod tlsf;
mod trace;
mod tracegen;
pub mod weights;

pub use align::align_up;
pub use arena::LinearArena;
pub use error::MemError;
pub use expandable::{ExpandableConfig, GranulePolicy, EXPECTED_PIECES};
pub use planner::{plan, verify_plan, MemPlan, PlanRequest};
pub use pool::{Allocation, AllocatorConfig, SubAllocator};
pub use provider::{
    Block, BlockProvider, CountingProvider, HostProvider, PhysicalGranule, ProviderStats,
    TestProvider, VirtualRange,
};
pub use replay::{
    default_block_size, default_granule, replay_file, replay_source, replay_system, replay_trace,
    replay_trace_on, GranuleRule, ProviderChoice, ReplayOptions, ReplayReport,
};
pub use staging::{StagingRing, StagingSlot};
pub use stats::{human_bytes, Stats};
pub use stream::{CompletionToken, FakeTimeline, StreamId, Synchronous, TokenSource};
pub use trace::{parse_trace, read_trace, Trace, TraceError, TraceEvent};
pub use tracegen::{ModelShape, TraceSpec};
