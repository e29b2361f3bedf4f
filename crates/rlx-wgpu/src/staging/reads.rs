//! Downloads through the staging pool: a pipelined read of one range (one submission per
//! chunk, each read out while the device fills the next), and a program run's outputs
//! copied into download chunks by the run's own submission.

use super::{dev_err, token, StagingPool, ALIGN};
use crate::probe::Context;
use crate::WgpuError;
use rlx_mem::{LinearArena, StagingSlot};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// A download chunk holding copies of one submission.
struct Held {
    slot: StagingSlot,
    index: usize,
    /// bytes of the chunk the copies filled (a multiple of 4)
    used: usize,
}

/// Outputs of a run staged into download chunks ([`StagingPool::stage_reads`]): where each
/// landed, and those left for a read after the run (larger than a chunk, or no chunk free).
pub struct ReadBatch {
    seq: u64,
    held: Vec<Held>,
    /// per output: (held chunk, offset in it, bytes), or the source range to read later
    places: Vec<Place>,
}

enum Place {
    Staged(usize, usize, usize),
    Later(wgpu::Buffer, u64, usize),
}

impl StagingPool {
    /// Reads `len` bytes at `offset` of `src`. Staged uploads are submitted first, so a
    /// read sees every write before it.
    ///
    /// # Errors
    /// A staging buffer could not be created or mapped, or a device failure.
    pub fn read(
        &mut self,
        ctx: &Context,
        src: &wgpu::Buffer,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, WgpuError> {
        self.flush(ctx)?;
        let mut out = vec![0u8; len];
        // (held chunk, bytes, where in `out`, submission)
        let mut in_flight: VecDeque<(Held, usize, usize, u64)> = VecDeque::new();
        let mut sent = 0;
        let result = loop {
            if sent < len {
                match self.try_take(ctx, false) {
                    Ok(Some((slot, index))) => {
                        let piece = (len - sent).min(self.chunk_bytes);
                        let padded = piece.next_multiple_of(4);
                        let held = Held {
                            slot,
                            index,
                            used: padded,
                        };
                        let seq = self.submit_read(ctx, &held, src, offset + sent as u64);
                        in_flight.push_back((held, piece, sent, seq));
                        sent += piece;
                        continue;
                    }
                    Ok(None) if !in_flight.is_empty() => {}
                    Ok(None) => break self.wait_oldest(ctx),
                    Err(e) => break Err(e),
                }
            }
            let Some((held, piece, at, seq)) = in_flight.pop_front() else {
                break Ok(());
            };
            let copied = self
                .wait_seq(ctx, seq)
                .and_then(|()| self.copy_out(&held, 0, &mut out[at..at + piece]));
            self.give_back(held);
            if let Err(e) = copied {
                break Err(e);
            }
        };
        // on failure, chunks still in flight go back once their copies completed
        for (held, _, _, seq) in in_flight {
            let _ = self.wait_seq(ctx, seq);
            self.give_back(held);
        }
        result.map(|()| out)
    }

    /// Submits a copy of `held.used` bytes from `offset` of `src` into a download chunk,
    /// mapped for reading when it completes; its sequence number.
    fn submit_read(&mut self, ctx: &Context, held: &Held, src: &wgpu::Buffer, offset: u64) -> u64 {
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("rlx download"),
            });
        if let Some(chunk) = &self.down.chunks[held.index] {
            encoder.copy_buffer_to_buffer(src, offset, &chunk.buffer, 0, held.used as u64);
        }
        let seq = self.next_seq();
        self.on_submit(&encoder, false, &[held.index], seq);
        let index = ctx.queue.submit([encoder.finish()]);
        self.submitted.push_back((seq, index));
        self.stats.allocs += 1;
        seq
    }

    /// Copies `out.len()` bytes at `at` of a mapped download chunk into `out`.
    fn copy_out(&self, held: &Held, at: usize, out: &mut [u8]) -> Result<(), WgpuError> {
        let chunk = self.down.chunks[held.index]
            .as_ref()
            .ok_or_else(|| WgpuError::Invalid("download chunk missing".into()))?;
        if chunk.lost.load(Ordering::Acquire) {
            return Err(dev_err(
                "map download",
                "wgpu could not map the staging buffer",
            ));
        }
        let view = chunk
            .buffer
            .get_mapped_range(at as u64..(at + out.len().next_multiple_of(4)) as u64)
            .map_err(|e| dev_err("get_mapped_range", e))?;
        out.copy_from_slice(&view[..out.len()]);
        Ok(())
    }

    /// Unmaps a download chunk whose copies were read (or abandoned) and lets the ring
    /// hand it out again.
    fn give_back(&mut self, held: Held) {
        if let Some(chunk) = &self.down.chunks[held.index] {
            if !chunk.lost.load(Ordering::Acquire) && held.used > 0 {
                chunk.buffer.unmap();
            }
        }
        let _ = self.down.ring.submit(held.slot, token(0));
    }

    /// Records copies of a run's outputs (`(buffer, offset, bytes)` each) into download
    /// chunks on the run's `encoder`, packed several to a chunk; outputs larger than a chunk,
    /// or beyond the chunks free, are read after the run. Submit `encoder` next, then pass
    /// its index to [`StagingPool::finish_reads`].
    ///
    /// # Errors
    /// A staging buffer could not be created.
    pub fn stage_reads(
        &mut self,
        ctx: &Context,
        encoder: &mut wgpu::CommandEncoder,
        outputs: &[(wgpu::Buffer, u64, usize)],
    ) -> Result<ReadBatch, WgpuError> {
        let mut held: Vec<Held> = Vec::new();
        let mut arena: Option<LinearArena> = None;
        let mut places = Vec::with_capacity(outputs.len());
        for (src, offset, len) in outputs {
            let padded = len.max(&4).next_multiple_of(4);
            let fits = |a: &LinearArena| a.used().next_multiple_of(ALIGN) + padded <= a.capacity();
            if padded <= self.chunk_bytes && !arena.as_ref().is_some_and(fits) {
                arena = match self.try_take(ctx, false) {
                    Ok(Some((slot, index))) => {
                        held.push(Held {
                            slot,
                            index,
                            used: 0,
                        });
                        Some(LinearArena::new(0, self.chunk_bytes))
                    }
                    Ok(None) => None,
                    Err(e) => {
                        for h in held {
                            self.give_back(Held { used: 0, ..h });
                        }
                        return Err(e);
                    }
                };
            }
            let at = match arena.as_mut() {
                Some(a) if padded <= self.chunk_bytes => a.alloc(padded, ALIGN).ok(),
                _ => None,
            };
            let (Some(at), Some(h)) = (at, held.last_mut()) else {
                places.push(Place::Later(src.clone(), *offset, *len));
                continue;
            };
            h.used = at + padded;
            if let Some(chunk) = &self.down.chunks[h.index] {
                encoder.copy_buffer_to_buffer(
                    src,
                    *offset,
                    &chunk.buffer,
                    at as u64,
                    padded as u64,
                );
            }
            self.stats.allocs += 1;
            places.push(Place::Staged(held.len() - 1, at, *len));
        }
        // a chunk that took no copy (its output went to `Later`) goes back unmapped
        let (held, idle): (Vec<Held>, Vec<Held>) = held.into_iter().partition(|h| h.used > 0);
        for h in idle {
            self.give_back(h);
        }
        let seq = self.next_seq();
        let indices: Vec<usize> = held.iter().map(|h| h.index).collect();
        self.on_submit(encoder, false, &indices, seq);
        Ok(ReadBatch { seq, held, places })
    }

    /// Waits for the run submitted as `index`, reads every output of `batch` (those left
    /// for later through [`StagingPool::read`]) and gives the chunks back.
    ///
    /// # Errors
    /// A mapping failed, or a device failure.
    pub fn finish_reads(
        &mut self,
        ctx: &Context,
        batch: ReadBatch,
        index: wgpu::SubmissionIndex,
    ) -> Result<Vec<Vec<u8>>, WgpuError> {
        self.submitted.push_back((batch.seq, index));
        let waited = self.wait_seq(ctx, batch.seq);
        let mut outs = Vec::with_capacity(batch.places.len());
        let mut failed = waited.err();
        for place in &batch.places {
            if failed.is_some() {
                break;
            }
            let read = match place {
                Place::Staged(h, at, len) => {
                    let mut out = vec![0u8; *len];
                    self.copy_out(&batch.held[*h], *at, &mut out).map(|()| out)
                }
                Place::Later(..) => Ok(Vec::new()),
            };
            match read {
                Ok(out) => outs.push(out),
                Err(e) => failed = Some(e),
            }
        }
        for h in batch.held {
            self.give_back(h);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        for (place, out) in batch.places.iter().zip(outs.iter_mut()) {
            if let Place::Later(src, offset, len) = place {
                *out = self.read(ctx, src, *offset, *len)?;
            }
        }
        Ok(outs)
    }
}
