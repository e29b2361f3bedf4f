//! The staging pool: one block of pinned host memory (`RLX_CUDA_STAGING` bytes) through which
//! every upload and download of the backend goes — program inputs and outputs, weights,
//! constants, session buffers. A host slice is copied into the pool and its copy to the device
//! enqueued at once, so the caller's memory is free when `upload` returns and the transfer
//! overlaps whatever the host does next (staging the next chunk or tensor, launching the
//! run). Large copies go in chunks (`RLX_CUDA_STAGING_CHUNK`), so filling one chunk overlaps
//! the transfer of the previous one; the pipeline is [`pipeline::Pipeline`], the device side
//! here. Callers hold the device's queue ([`CudaDevice::queue`]) so the copies and marks go
//! on the stream in their order, never into another thread's graph capture.

pub mod pipeline;

use crate::device::CudaDevice;
use crate::mem_calls::Mark;
use crate::memory::Pinned;
use crate::settings::MemorySettings;
use crate::CudaError;
use cudarc::driver::result;
use pipeline::{Engine, Pipeline};
use std::sync::{Arc, Mutex, OnceLock};

pub use pipeline::StagingStats;

/// The stream and pinned pool under the pipeline.
struct CudaEngine {
    device: Arc<CudaDevice>,
    host: Pinned,
}

impl Engine for CudaEngine {
    type Mark = Mark;

    fn host(&mut self) -> &mut [u8] {
        self.host.as_mut_slice()
    }

    fn h2d(&mut self, dst: u64, at: usize, len: usize) -> Result<(), CudaError> {
        let src = &self.host.as_slice()[at..at + len];
        // SAFETY: `dst..dst + len` is device memory the caller owns; the pool bytes stay
        // untouched until the mark after this copy completes (the pipeline's ring).
        unsafe { result::memcpy_htod_async(dst, src, self.device.stream()) }
            .map_err(|e| CudaError::driver(format!("cuMemcpyHtoDAsync {len} bytes to {dst:#x}"), e))
    }

    fn d2h(&mut self, at: usize, src: u64, len: usize) -> Result<(), CudaError> {
        let dst = &mut self.host.as_mut_slice()[at..at + len];
        // SAFETY: `src..src + len` is device memory the caller owns; the pool bytes are not
        // read until the mark after this copy completes.
        unsafe { result::memcpy_dtoh_async(dst, src, self.device.stream()) }.map_err(|e| {
            CudaError::driver(format!("cuMemcpyDtoHAsync {len} bytes from {src:#x}"), e)
        })
    }

    fn record(&mut self, spare: Option<Mark>) -> Result<Mark, CudaError> {
        let mark = match spare {
            Some(m) => m,
            None => Mark::new()?,
        };
        mark.record(&self.device)?;
        Ok(mark)
    }

    fn is_done(&mut self, mark: &Mark) -> Result<bool, CudaError> {
        mark.is_done()
    }

    fn wait(&mut self, mark: &Mark) -> Result<(), CudaError> {
        mark.wait()
    }
}

/// Pinned host memory staging copies between host and device (see the module
/// documentation).
pub struct StagingPool {
    device: Arc<CudaDevice>,
    capacity: usize,
    pipeline: Mutex<Pipeline<CudaEngine>>,
}

impl StagingPool {
    /// The process-wide pool, of the size the settings give, allocated on first use.
    ///
    /// # Errors
    /// CUDA is unavailable, the settings are malformed, or the pinned memory is refused.
    pub fn get() -> Result<Arc<StagingPool>, CudaError> {
        static POOL: OnceLock<Result<Arc<StagingPool>, String>> = OnceLock::new();
        POOL.get_or_init(|| {
            let make = || {
                let s = MemorySettings::get()?;
                let device = CudaDevice::get()?;
                StagingPool::new(&device, s.staging_bytes, s.staging_chunk).map(Arc::new)
            };
            make().map_err(|e: CudaError| e.to_string())
        })
        .clone()
        .map_err(|e| CudaError::Invalid(format!("staging pool: {e}")))
    }

    /// A pool of `capacity` bytes of pinned memory copying in chunks of `chunk` bytes (at
    /// most half the pool, see [`crate::settings::effective_chunk`]).
    ///
    /// # Errors
    /// The driver refuses the pinned memory.
    pub fn new(
        device: &Arc<CudaDevice>,
        capacity: usize,
        chunk: usize,
    ) -> Result<StagingPool, CudaError> {
        let capacity = capacity.max(8192);
        let host = Pinned::new(device, capacity)?;
        let engine = CudaEngine {
            device: device.clone(),
            host,
        };
        Ok(StagingPool {
            device: device.clone(),
            capacity,
            pipeline: Mutex::new(Pipeline::new(engine, capacity, chunk)),
        })
    }

    fn pipeline(&self) -> std::sync::MutexGuard<'_, Pipeline<CudaEngine>> {
        self.pipeline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes of pinned memory in the pool.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The chunk copies are split into.
    pub fn chunk(&self) -> usize {
        self.pipeline().chunk()
    }

    /// What the pool has done so far.
    pub fn stats(&self) -> StagingStats {
        self.pipeline().stats()
    }

    /// Enqueues copies of host bytes to device addresses, `(dst, bytes)` in order, on the
    /// device's stream. Returns when the bytes are in the pool: the caller's memory may be
    /// reused at once, and work enqueued after this call sees the data.
    ///
    /// # Errors
    /// The driver refuses a copy (named with its size and address).
    pub fn upload(&self, copies: &[(u64, &[u8])]) -> Result<(), CudaError> {
        self.device.bind()?;
        self.pipeline().upload(copies)
    }

    /// Copies `(src, len)` device ranges after the work enqueued so far on the stream,
    /// handing each chunk to `sink(copy index, offset, bytes)` in order. Returns once every
    /// byte was handed over.
    ///
    /// # Errors
    /// The driver refuses a copy, or earlier work on the stream failed.
    pub fn download_with(
        &self,
        copies: &[(u64, usize)],
        mut sink: impl FnMut(usize, usize, &[u8]),
    ) -> Result<(), CudaError> {
        self.device.bind()?;
        self.pipeline().download(copies, &mut sink)
    }

    /// Copies device ranges into host slices, `(src, dst)`, after the work enqueued so far.
    ///
    /// # Errors
    /// As [`StagingPool::download_with`].
    pub fn download(&self, copies: &mut [(u64, &mut [u8])]) -> Result<(), CudaError> {
        let ranges: Vec<(u64, usize)> = copies.iter().map(|(src, d)| (*src, d.len())).collect();
        self.download_with(&ranges, |i, off, bytes| {
            pipeline::copy_host(&mut copies[i].1[off..off + bytes.len()], bytes)
        })
    }

    /// Waits until every copy through the pool finished (uploads included).
    ///
    /// # Errors
    /// Earlier work on the stream failed.
    pub fn flush(&self) -> Result<(), CudaError> {
        self.device.bind()?;
        self.pipeline().flush()
    }
}
