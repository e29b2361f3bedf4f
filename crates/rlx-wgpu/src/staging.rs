//! The staging pool: host-visible wgpu buffers that every upload and download of a context
//! goes through, bounded by [`crate::WgpuOptions::staging_bytes`].
//!
//! wgpu maps a buffer as a whole and refuses a mapped buffer in a submission, so the pool is
//! a ring of *chunks*, one buffer each, rather than one buffer carved in place: rlx-mem's
//! [`StagingRing`] hands out whole chunks in order and recycles one once the submission that
//! used it completed, and a [`LinearArena`] packs several small copies into one chunk.
//! Upload chunks come back already mapped for writing (`map_buffer_on_submit`), so the host
//! fills one while the device copies out of the previous; uploads return without waiting
//! (the queue runs them before any later work). A download submits one copy per chunk and
//! reads each out while the device copies the next.

use crate::probe::Context;
use crate::WgpuError;
use rlx_mem::{CompletionToken, LinearArena, MemError, StagingRing, StagingSlot, Stats, StreamId};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod reads;

pub use reads::ReadBatch;

/// Offsets of copies inside a chunk (wgpu's MAP_ALIGNMENT is 8, copies need 4).
const ALIGN: usize = 256;
/// The largest chunk: big enough to amortize a submission, small enough to pipeline.
const MAX_CHUNK: usize = 16 << 20;
/// How long a copy may take before the pool reports the device stuck.
const DEADLINE: Duration = Duration::from_secs(60);

/// One staging buffer; `lost` is set when wgpu could not map it back.
struct Chunk {
    buffer: wgpu::Buffer,
    lost: Arc<AtomicBool>,
}

/// The chunks of one direction and the ring that orders their reuse.
struct Ring {
    mode: wgpu::MapMode,
    chunks: Vec<Option<Chunk>>,
    ring: StagingRing,
}

/// The upload chunk being filled, with the encoder holding its copies.
struct Open {
    slot: StagingSlot,
    index: usize,
    arena: LinearArena,
    encoder: wgpu::CommandEncoder,
}

/// Completed submissions: every pool submission raises `done` to its sequence number when
/// the device finished it (after its chunks were mapped back).
struct Done<'a>(&'a AtomicU64);

impl rlx_mem::TokenSource for Done<'_> {
    fn is_complete(&self, token: CompletionToken) -> bool {
        self.0.load(Ordering::Acquire) >= token.value
    }
}

fn token(seq: u64) -> CompletionToken {
    CompletionToken {
        stream: StreamId(0),
        value: seq,
    }
}

fn dev_err(call: &str, e: impl std::fmt::Display) -> WgpuError {
    WgpuError::Device {
        call: call.into(),
        message: e.to_string(),
    }
}

/// Host-visible staging buffers of one context, in two rings (uploads, downloads).
pub struct StagingPool {
    budget: usize,
    chunk_bytes: usize,
    up: Ring,
    down: Ring,
    open: Option<Open>,
    done: Arc<AtomicU64>,
    last_seq: u64,
    submitted: VecDeque<(u64, wgpu::SubmissionIndex)>,
    stats: Stats,
}

impl StagingPool {
    /// A pool of `budget` bytes for a device whose buffers may be `max_buffer` bytes: half
    /// for uploads and half for downloads, in chunks of an eighth of the budget (at most
    /// 16 MiB), created on first use.
    pub fn new(budget: usize, max_buffer: u64) -> StagingPool {
        let half = budget / 2;
        let cap = (max_buffer.min(MAX_CHUNK as u64) as usize).max(ALIGN);
        let chunk_bytes = (half / 4).clamp(ALIGN, cap) / ALIGN * ALIGN;
        let n_chunks = (half / chunk_bytes).max(1);
        let ring = |mode| Ring {
            mode,
            chunks: (0..n_chunks).map(|_| None).collect(),
            ring: StagingRing::new(0, n_chunks * chunk_bytes),
        };
        StagingPool {
            budget,
            chunk_bytes,
            up: ring(wgpu::MapMode::Write),
            down: ring(wgpu::MapMode::Read),
            open: None,
            done: Arc::new(AtomicU64::new(0)),
            last_seq: 0,
            submitted: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// The size the pool was configured with (0: the direct path, no pool).
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes of one chunk: the largest piece one copy moves.
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    /// Counters in rlx-mem's terms: chunks are the provider's blocks (`provider_allocs`,
    /// `bytes_reserved`), `allocs` counts the copies staged, and bytes in use are those of
    /// chunks whose copies were not yet seen complete.
    pub fn stats(&mut self) -> Stats {
        let done = Done(&self.done);
        self.up.ring.retire(&done);
        self.down.ring.retire(&done);
        let mut s = self.stats;
        s.bytes_in_use = self.up.ring.in_flight_bytes() + self.down.ring.in_flight_bytes();
        s.largest_free_range = self.chunk_bytes;
        s.fragmentation = Stats::fragmentation_of(s.peak_bytes_reserved, s.peak_bytes_in_use);
        s
    }

    /// Keeps the counters of the pool this one replaces (its chunks already released).
    pub(crate) fn carry_stats(&mut self, old: Stats) {
        self.stats = old;
    }

    fn next_seq(&mut self) -> u64 {
        self.last_seq += 1;
        self.last_seq
    }

    fn note_in_use(&mut self) {
        let in_use = self.up.ring.in_flight_bytes() + self.down.ring.in_flight_bytes();
        self.stats.peak_bytes_in_use = self.stats.peak_bytes_in_use.max(in_use);
    }

    /// Registers what a submission of `encoder` must do when it completes: map `chunks` of
    /// `ring` back (flagging a chunk whose mapping failed) and raise `done` to `seq`.
    fn on_submit(&self, encoder: &wgpu::CommandEncoder, up: bool, indices: &[usize], seq: u64) {
        let ring = if up { &self.up } else { &self.down };
        for &i in indices {
            if let Some(chunk) = &ring.chunks[i] {
                let lost = chunk.lost.clone();
                encoder.map_buffer_on_submit(&chunk.buffer, ring.mode, .., move |r| {
                    if r.is_err() {
                        lost.store(true, Ordering::Release);
                    }
                });
            }
        }
        let done = self.done.clone();
        encoder.on_submitted_work_done(move || {
            done.fetch_max(seq, Ordering::AcqRel);
        });
    }

    /// A free chunk of `ring` (created, or recreated after a failed mapping, as needed), or
    /// `None` while every chunk is held by copies in flight.
    fn try_take(
        &mut self,
        ctx: &Context,
        up: bool,
    ) -> Result<Option<(StagingSlot, usize)>, WgpuError> {
        let chunk_bytes = self.chunk_bytes;
        let done = Done(&self.done);
        let ring = if up { &mut self.up } else { &mut self.down };
        let slot = match ring.ring.alloc(chunk_bytes, chunk_bytes, &done) {
            Ok(slot) => slot,
            Err(MemError::StagingFull { .. }) => return Ok(None),
            Err(e) => return Err(WgpuError::Invalid(format!("staging ring: {e}"))),
        };
        let index = slot.addr / chunk_bytes;
        let stale = ring.chunks[index]
            .as_ref()
            .is_none_or(|c| c.lost.load(Ordering::Acquire));
        if stale {
            let created = create_chunk(ctx, chunk_bytes, up);
            let chunk = match created {
                Ok(c) => c,
                Err(e) => {
                    // hand the slot back at once: nothing was copied through it
                    let _ = ring.ring.submit(slot, token(0));
                    return Err(e);
                }
            };
            if let Some(old) = ring.chunks[index].replace(chunk) {
                old.buffer.destroy();
                self.stats.provider_frees += 1;
                self.stats.bytes_reserved -= chunk_bytes;
            }
            self.stats.provider_allocs += 1;
            self.stats.bytes_reserved += chunk_bytes;
            self.stats.peak_bytes_reserved = self
                .stats
                .peak_bytes_reserved
                .max(self.stats.bytes_reserved);
        }
        self.note_in_use();
        Ok(Some((slot, index)))
    }

    /// Blocks until the oldest pool submission completed.
    ///
    /// # Errors
    /// Nothing is in flight (the ring is held by unfinished reads), or a device failure.
    fn wait_oldest(&mut self, ctx: &Context) -> Result<(), WgpuError> {
        let seq =
            self.submitted.front().map(|(s, _)| *s).ok_or_else(|| {
                WgpuError::Invalid("staging pool full with no copy in flight".into())
            })?;
        self.wait_seq(ctx, seq)
    }

    /// Blocks until the pool submission `seq` completed and its chunks are mapped back.
    fn wait_seq(&mut self, ctx: &Context, seq: u64) -> Result<(), WgpuError> {
        if self.done.load(Ordering::Acquire) < seq {
            if let Some((_, index)) = self.submitted.iter().find(|(s, _)| *s >= seq) {
                ctx.device
                    .poll(wgpu::PollType::Wait {
                        submission_index: Some(index.clone()),
                        timeout: Some(DEADLINE),
                    })
                    .map_err(|e| dev_err("poll", e))?;
            }
            // Another thread polling the device may have collected our callbacks and not
            // yet run them when our poll returns.
            let deadline = Instant::now() + DEADLINE;
            while self.done.load(Ordering::Acquire) < seq {
                if Instant::now() >= deadline {
                    return Err(dev_err("staging copy", "the copy never completed"));
                }
                let _ = ctx.device.poll(wgpu::PollType::Poll);
                std::thread::yield_now();
            }
        }
        let done = self.done.load(Ordering::Acquire);
        while self.submitted.front().is_some_and(|(s, _)| *s <= done) {
            self.submitted.pop_front();
        }
        Ok(())
    }

    /// Stages a copy of `bytes` (padded with zeros to whole words) to `offset` of `dst`;
    /// the copies are submitted when a chunk fills and by [`StagingPool::flush`]. Waits only
    /// while every upload chunk is in flight.
    ///
    /// # Errors
    /// A staging buffer could not be created or mapped, or a device failure.
    pub fn write(
        &mut self,
        ctx: &Context,
        dst: &wgpu::Buffer,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), WgpuError> {
        let mut done = 0;
        while done < bytes.len() {
            if self.open.is_none() {
                self.open = Some(self.open_chunk(ctx)?);
            }
            let Some(open) = self.open.as_ref() else {
                continue;
            };
            let start = open.arena.used().next_multiple_of(ALIGN);
            let room = open.arena.capacity().saturating_sub(start);
            let left = bytes.len() - done;
            // a piece that fits whole goes in; a larger one fills what is left of a
            // chunk, unless that is a sliver
            if room == 0 || (room < left && room < self.chunk_bytes / 4) {
                self.flush(ctx)?;
                continue;
            }
            let piece = left.min(room);
            let staged = self.stage(&bytes[done..done + piece], dst, offset + done as u64);
            if let Err(e) = staged {
                // what was staged before still goes out
                let _ = self.flush(ctx);
                return Err(e);
            }
            done += piece;
        }
        Ok(())
    }

    /// Copies `piece` into the open chunk and records its copy to `offset` of `dst`.
    fn stage(&mut self, piece: &[u8], dst: &wgpu::Buffer, offset: u64) -> Result<(), WgpuError> {
        let open = self
            .open
            .as_mut()
            .ok_or_else(|| WgpuError::Invalid("no open staging chunk".into()))?;
        let padded = piece.len().next_multiple_of(4);
        let at = open
            .arena
            .alloc(padded, ALIGN)
            .map_err(|e| WgpuError::Invalid(format!("staging chunk: {e}")))?;
        let chunk = self.up.chunks[open.index]
            .as_ref()
            .ok_or_else(|| WgpuError::Invalid("open staging chunk missing".into()))?;
        {
            let mut view = chunk
                .buffer
                .get_mapped_range_mut(at as u64..(at + padded) as u64)
                .map_err(|e| dev_err("map staging chunk", e))?;
            view.slice(..piece.len()).copy_from_slice(piece);
            if padded > piece.len() {
                view.slice(piece.len()..)
                    .copy_from_slice(&[0u8; 4][..padded - piece.len()]);
            }
        }
        open.encoder
            .copy_buffer_to_buffer(&chunk.buffer, at as u64, dst, offset, padded as u64);
        self.stats.allocs += 1;
        Ok(())
    }

    /// A fresh upload chunk to fill, waiting for one while all are in flight.
    fn open_chunk(&mut self, ctx: &Context) -> Result<Open, WgpuError> {
        let (slot, index) = loop {
            match self.try_take(ctx, true)? {
                Some(taken) => break taken,
                None => self.wait_oldest(ctx)?,
            }
        };
        let encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("rlx upload"),
            });
        Ok(Open {
            slot,
            index,
            arena: LinearArena::new(0, self.chunk_bytes),
            encoder,
        })
    }

    /// Submits the staged uploads; they run before any work submitted after this returns.
    ///
    /// # Errors
    /// The staging ring lost track of the chunk (an internal error).
    pub fn flush(&mut self, ctx: &Context) -> Result<(), WgpuError> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        if let Some(chunk) = &self.up.chunks[open.index] {
            chunk.buffer.unmap();
        }
        let seq = self.next_seq();
        self.on_submit(&open.encoder, true, &[open.index], seq);
        let index = ctx.queue.submit([open.encoder.finish()]);
        self.submitted.push_back((seq, index));
        self.up
            .ring
            .submit(open.slot, token(seq))
            .map_err(|e| WgpuError::Invalid(format!("staging ring: {e}")))
    }

    /// Submits staged uploads and waits for every pool copy in flight.
    ///
    /// # Errors
    /// A device failure.
    pub fn wait_idle(&mut self, ctx: &Context) -> Result<(), WgpuError> {
        self.flush(ctx)?;
        match self.submitted.back().map(|(s, _)| *s) {
            Some(seq) => self.wait_seq(ctx, seq),
            None => Ok(()),
        }
    }

    /// Destroys every chunk (after waiting for their copies); the pool starts again empty.
    ///
    /// # Errors
    /// A device failure while waiting.
    pub fn release(&mut self, ctx: &Context) -> Result<(), WgpuError> {
        self.wait_idle(ctx)?;
        for ring in [&mut self.up, &mut self.down] {
            for chunk in ring.chunks.iter_mut().filter_map(Option::take) {
                chunk.buffer.destroy();
                self.stats.provider_frees += 1;
                self.stats.bytes_reserved -= self.chunk_bytes;
            }
        }
        Ok(())
    }
}

/// A staging buffer of `bytes`: for uploads mapped for writing from the start, for
/// downloads unmapped until a copy fills it.
fn create_chunk(ctx: &Context, bytes: usize, up: bool) -> Result<Chunk, WgpuError> {
    let usage = if up {
        wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC
    } else {
        wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST
    };
    let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(if up {
            "rlx upload staging"
        } else {
            "rlx download staging"
        }),
        size: bytes as u64,
        usage,
        mapped_at_creation: up,
    });
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Err(WgpuError::OutOfMemory {
            requested: bytes,
            in_use: 0,
            message: format!("{} staging buffer: {e}", ctx.label()),
        });
    }
    Ok(Chunk {
        buffer,
        lost: Arc::new(AtomicBool::new(false)),
    })
}
