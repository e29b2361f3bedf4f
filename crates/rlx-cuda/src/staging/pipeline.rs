//! The staging pipeline, written once over an [`Engine`] (the CUDA stream, or a fake in the
//! tests below): copies are cut into chunks, each chunk takes a slot of rlx-mem's
//! [`StagingRing`] over the pinned pool, and marks recorded on the stream tell when a slot
//! may be reused. An upload copies chunk `i + 1` into the pool while the device still
//! reads chunk `i`; a download hands chunk `i` to the caller while chunk `i + 1` is in
//! flight. Upload slots are released by the mark after them; download slots only once
//! their bytes were handed over, so the ring never recycles unread data.

use crate::CudaError;
use rlx_mem::{CompletionToken, MemError, StagingRing, StagingSlot, StreamId, TokenSource};
use std::collections::VecDeque;

/// Alignment of every slot (the copy engines move aligned pieces fastest).
const SLOT_ALIGN: usize = 256;

/// Host copies at least this large are split over [`COPY_THREADS`] threads (one thread
/// copies at about 10 GB/s, slower than the bus).
pub const PARALLEL_COPY: usize = 1 << 20;

/// Threads for one large host copy.
pub const COPY_THREADS: usize = 4;

/// The device side of staging, in the order calls are made on one stream.
pub trait Engine {
    /// A completion mark recorded on the stream.
    type Mark;
    /// The whole pinned pool.
    fn host(&mut self) -> &mut [u8];
    /// Enqueues a copy of `len` pool bytes from `at` to device address `dst`.
    fn h2d(&mut self, dst: u64, at: usize, len: usize) -> Result<(), CudaError>;
    /// Enqueues a copy of `len` bytes from device address `src` into the pool at `at`.
    fn d2h(&mut self, at: usize, src: u64, len: usize) -> Result<(), CudaError>;
    /// Records a mark after everything enqueued so far (reusing `spare` when given).
    fn record(&mut self, spare: Option<Self::Mark>) -> Result<Self::Mark, CudaError>;
    /// Whether the work before `mark` has finished.
    fn is_done(&mut self, mark: &Self::Mark) -> Result<bool, CudaError>;
    /// Waits for the work before `mark`.
    fn wait(&mut self, mark: &Self::Mark) -> Result<(), CudaError>;
}

/// The `(offset, len)` pieces of a copy of `len` bytes in chunks of at most `chunk` bytes
/// (none for an empty copy).
pub fn chunks(len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    let chunk = chunk.max(1);
    (0..len)
        .step_by(chunk)
        .map(move |off| (off, chunk.min(len - off)))
}

/// Copies `src` into `dst` (same length), on several threads when large.
pub fn copy_host(dst: &mut [u8], src: &[u8]) {
    if src.len() < PARALLEL_COPY {
        dst.copy_from_slice(src);
        return;
    }
    let part = src.len().div_ceil(COPY_THREADS);
    std::thread::scope(|s| {
        for (d, s_part) in dst.chunks_mut(part).zip(src.chunks(part)) {
            s.spawn(move || d.copy_from_slice(s_part));
        }
    });
}

/// What the staging pool has done.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StagingStats {
    /// bytes copied to the device
    pub uploaded: u64,
    /// bytes copied from the device
    pub downloaded: u64,
    /// chunks moved, both ways
    pub chunks: u64,
    /// times a copy waited for a slot to free
    pub waits: u64,
    /// marks recorded
    pub marks: u64,
}

/// Every mark up to this value has completed.
struct Done(u64);

impl TokenSource for Done {
    fn is_complete(&self, token: CompletionToken) -> bool {
        token.value <= self.0
    }
}

fn token(value: u64) -> CompletionToken {
    CompletionToken {
        stream: StreamId(0),
        value,
    }
}

fn internal(what: String) -> CudaError {
    CudaError::Invalid(format!("staging pool: {what}"))
}

fn ring_error(e: MemError) -> CudaError {
    internal(e.to_string())
}

/// A download chunk in flight: its slot, where its bytes go, and the mark after it.
struct Pending {
    slot: StagingSlot,
    copy_idx: usize,
    offset: usize,
    len: usize,
    mark: u64,
}

/// The staging pipeline over one engine (see the module documentation).
pub struct Pipeline<E: Engine> {
    engine: E,
    ring: StagingRing,
    chunk: usize,
    /// marks recorded and not yet seen complete, oldest first, with their values
    marks: VecDeque<(u64, E::Mark)>,
    spare: Vec<E::Mark>,
    recorded: u64,
    done: u64,
    /// upload slots enqueued but behind no mark yet
    unsealed: Vec<StagingSlot>,
    unsealed_bytes: usize,
    stats: StagingStats,
}

impl<E: Engine> Pipeline<E> {
    /// A pipeline over `engine`'s pool of `capacity` bytes, in chunks of `chunk` bytes (at
    /// most half the pool, see [`crate::settings::effective_chunk`]).
    pub fn new(engine: E, capacity: usize, chunk: usize) -> Pipeline<E> {
        Pipeline {
            engine,
            ring: StagingRing::new(0, capacity),
            chunk: crate::settings::effective_chunk(capacity, chunk),
            marks: VecDeque::new(),
            spare: Vec::new(),
            recorded: 0,
            done: 0,
            unsealed: Vec::new(),
            unsealed_bytes: 0,
            stats: StagingStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> StagingStats {
        self.stats
    }

    /// The chunk size in effect.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// The engine (tests inspect the fake).
    pub fn engine_mut(&mut self) -> &mut E {
        &mut self.engine
    }

    /// Notes the marks that completed, oldest first, without waiting.
    fn poll(&mut self) -> Result<(), CudaError> {
        while let Some((value, mark)) = self.marks.front() {
            if !self.engine.is_done(mark)? {
                break;
            }
            self.done = *value;
            if let Some((_, m)) = self.marks.pop_front() {
                self.spare.push(m);
            }
        }
        Ok(())
    }

    /// Waits for the oldest mark; false when none is in flight.
    fn wait_oldest(&mut self) -> Result<bool, CudaError> {
        let Some((value, mark)) = self.marks.front() else {
            return Ok(false);
        };
        let value = *value;
        self.engine.wait(mark)?;
        self.done = value;
        if let Some((_, m)) = self.marks.pop_front() {
            self.spare.push(m);
        }
        Ok(true)
    }

    /// Waits until mark `value` completed.
    fn wait_until(&mut self, value: u64) -> Result<(), CudaError> {
        while self.done < value {
            if !self.wait_oldest()? {
                return Err(internal(format!("mark {value} was never recorded")));
            }
        }
        Ok(())
    }

    /// Records a mark after everything enqueued; its value.
    fn record(&mut self) -> Result<u64, CudaError> {
        let mark = self.engine.record(self.spare.pop())?;
        self.recorded += 1;
        self.stats.marks += 1;
        self.marks.push_back((self.recorded, mark));
        Ok(self.recorded)
    }

    /// Puts the unsealed upload slots behind a new mark (no mark when there are none).
    fn seal(&mut self) -> Result<(), CudaError> {
        if self.unsealed.is_empty() {
            return Ok(());
        }
        // Should recording fail, the slots still go behind the next mark's value: any mark
        // recorded later follows their copies on the stream.
        let recorded = self.record();
        let value = *recorded.as_ref().unwrap_or(&(self.recorded + 1));
        for slot in self.unsealed.drain(..) {
            self.ring.submit(slot, token(value)).map_err(ring_error)?;
        }
        self.unsealed_bytes = 0;
        recorded.map(|_| ())
    }

    /// A slot of `len` bytes if the ring has room now (after retiring finished slots).
    fn try_slot(&mut self, len: usize) -> Result<Option<StagingSlot>, CudaError> {
        self.poll()?;
        match self.ring.alloc(len, SLOT_ALIGN, &Done(self.done)) {
            Ok(slot) => Ok(Some(slot)),
            Err(MemError::StagingFull { .. }) => Ok(None),
            Err(e) => Err(ring_error(e)),
        }
    }

    /// A slot for an upload chunk, waiting for older copies when the ring is full.
    fn upload_slot(&mut self, len: usize) -> Result<StagingSlot, CudaError> {
        loop {
            if let Some(slot) = self.try_slot(len)? {
                return Ok(slot);
            }
            self.stats.waits += 1;
            self.seal()?;
            if !self.wait_oldest()? {
                return Err(internal(format!(
                    "no room for {len} bytes in {} with nothing in flight",
                    self.ring.capacity()
                )));
            }
        }
    }

    /// Enqueues every copy `(device address, bytes)` to the device through the pool and
    /// returns once the bytes are in the pool (the caller's memory is free at once; the
    /// device has them when later work on the stream runs).
    ///
    /// # Errors
    /// The engine refuses a copy or a mark.
    pub fn upload(&mut self, copies: &[(u64, &[u8])]) -> Result<(), CudaError> {
        let result = self.upload_chunks(copies);
        let sealed = self.seal();
        result.and(sealed)
    }

    fn upload_chunks(&mut self, copies: &[(u64, &[u8])]) -> Result<(), CudaError> {
        for &(dst, src) in copies {
            for (offset, len) in chunks(src.len(), self.chunk) {
                let slot = self.upload_slot(len)?;
                let at = slot.addr;
                copy_host(
                    &mut self.engine.host()[at..at + len],
                    &src[offset..offset + len],
                );
                self.unsealed.push(slot);
                self.unsealed_bytes += len;
                self.engine.h2d(dst + offset as u64, at, len)?;
                self.stats.uploaded += len as u64;
                self.stats.chunks += 1;
                if self.unsealed_bytes >= self.chunk {
                    self.seal()?;
                }
            }
        }
        Ok(())
    }

    /// Copies `(device address, bytes)` from the device after the work enqueued so far,
    /// handing each chunk to `sink(copy index, offset, bytes)` in order as it lands. Returns
    /// once every chunk was handed over.
    ///
    /// # Errors
    /// The engine refuses a copy, or the device reports a failure of earlier work.
    pub fn download(
        &mut self,
        copies: &[(u64, usize)],
        sink: &mut dyn FnMut(usize, usize, &[u8]),
    ) -> Result<(), CudaError> {
        self.seal()?;
        let mut pending = VecDeque::new();
        let result = self.download_chunks(copies, sink, &mut pending);
        // After a failure the slots still in flight retire with their marks.
        for p in pending.drain(..) {
            let _ = self.ring.submit(p.slot, token(p.mark));
        }
        result
    }

    fn download_chunks(
        &mut self,
        copies: &[(u64, usize)],
        sink: &mut dyn FnMut(usize, usize, &[u8]),
        pending: &mut VecDeque<Pending>,
    ) -> Result<(), CudaError> {
        for (copy_idx, &(src, total)) in copies.iter().enumerate() {
            for (offset, len) in chunks(total, self.chunk) {
                let slot = loop {
                    if let Some(slot) = self.try_slot(len)? {
                        break slot;
                    }
                    self.stats.waits += 1;
                    if !pending.is_empty() {
                        self.hand_over(pending, sink)?;
                    } else if !self.wait_oldest()? {
                        return Err(internal(format!(
                            "no room for {len} bytes in {} with nothing in flight",
                            self.ring.capacity()
                        )));
                    }
                };
                if let Err(e) = self.engine.d2h(slot.addr, src + offset as u64, len) {
                    // nothing was enqueued into the slot: it is free at once
                    self.ring.submit(slot, token(0)).map_err(ring_error)?;
                    return Err(e);
                }
                let mark = match self.record() {
                    Ok(m) => m,
                    Err(e) => {
                        self.ring
                            .submit(slot, token(self.recorded + 1))
                            .map_err(ring_error)?;
                        return Err(e);
                    }
                };
                self.stats.downloaded += len as u64;
                self.stats.chunks += 1;
                pending.push_back(Pending {
                    slot,
                    copy_idx,
                    offset,
                    len,
                    mark,
                });
            }
        }
        while !pending.is_empty() {
            self.hand_over(pending, sink)?;
        }
        Ok(())
    }

    /// Waits for the oldest pending download chunk, hands its bytes over and frees its slot.
    fn hand_over(
        &mut self,
        pending: &mut VecDeque<Pending>,
        sink: &mut dyn FnMut(usize, usize, &[u8]),
    ) -> Result<(), CudaError> {
        let Some(mark) = pending.front().map(|p| p.mark) else {
            return Ok(());
        };
        self.wait_until(mark)?;
        let Some(p) = pending.pop_front() else {
            return Ok(());
        };
        let at = p.slot.addr;
        sink(p.copy_idx, p.offset, &self.engine.host()[at..at + p.len]);
        self.ring.submit(p.slot, token(p.mark)).map_err(ring_error)
    }

    /// Waits until every copy enqueued through the pool finished.
    ///
    /// # Errors
    /// The device reports a failure.
    pub fn flush(&mut self) -> Result<(), CudaError> {
        self.seal()?;
        while self.wait_oldest()? {}
        self.ring.retire(&Done(self.done));
        Ok(())
    }

    /// Bytes of the pool held by copies not known finished.
    pub fn in_flight_bytes(&self) -> usize {
        self.ring.in_flight_bytes()
    }
}

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
