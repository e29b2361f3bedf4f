//! Device memory on rlx-mem: [`WgpuProvider`] hands out large wgpu storage buffers as raw
//! blocks; rlx-mem's [`SubAllocator`] (TLSF, cached blocks, stats, trim-and-retry on out of
//! memory) carves them. A [`DeviceBuffer`] is a sub-range of one wgpu buffer, aligned to
//! the adapter's `min_storage_buffer_offset_alignment`, so each tensor binds at its own
//! offset. Blocks live at disjoint fake addresses; the block's handle names its buffer.

use crate::options::DEFAULT_STAGING_BYTES;
use crate::probe::Context;
use crate::staging::StagingPool;
use crate::WgpuError;
use rlx_mem::{
    Allocation, AllocatorConfig, Block, BlockProvider, MemError, ProviderStats, Stats, SubAllocator,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

type Buffers = Arc<Mutex<HashMap<u64, wgpu::Buffer>>>;

/// Raw blocks: one wgpu storage buffer each.
pub struct WgpuProvider {
    ctx: Arc<Context>,
    buffers: Buffers,
    name: String,
    next_handle: u64,
    next_addr: usize,
    stats: ProviderStats,
}

impl BlockProvider for WgpuProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn alloc(&mut self, size: usize, align: usize, exportable: bool) -> Result<Block, MemError> {
        if !align.is_power_of_two() {
            return Err(MemError::BadAlignment { align });
        }
        let fail = |reason: String| MemError::ProviderFailed {
            device: self.name.clone(),
            requested: size,
            reason,
        };
        if exportable {
            return Err(fail("exportable wgpu blocks are not supported".into()));
        }
        let bytes = size.max(4).next_multiple_of(4) as u64;
        if bytes > self.ctx.limits.max_buffer_size {
            return Err(fail(format!(
                "over the adapter's max_buffer_size of {} bytes",
                self.ctx.limits.max_buffer_size
            )));
        }
        let scope = self
            .ctx
            .device
            .push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rlx block"),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(fail(e.to_string()));
        }
        self.next_handle += 1;
        let handle = self.next_handle;
        let addr = self.next_addr.next_multiple_of(align.max(4096));
        self.next_addr = addr + (bytes as usize).next_multiple_of(1 << 20) + (1 << 20);
        self.buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(handle, buffer);
        self.stats.allocs += 1;
        self.stats.live_blocks += 1;
        self.stats.live_bytes += size;
        self.stats.peak_live_bytes = self.stats.peak_live_bytes.max(self.stats.live_bytes);
        Ok(Block {
            addr,
            size,
            align,
            exportable: false,
            handle,
        })
    }

    fn free(&mut self, block: Block) {
        if let Some(b) = self
            .buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&block.handle)
        {
            b.destroy();
        }
        self.stats.frees += 1;
        self.stats.live_blocks = self.stats.live_blocks.saturating_sub(1);
        self.stats.live_bytes = self.stats.live_bytes.saturating_sub(block.size);
    }

    fn stats(&self) -> ProviderStats {
        self.stats
    }
}

/// The device's shared pool: every program, weight and scratch of one context, and the
/// staging pool every upload and download of the context goes through.
pub struct DeviceMemory {
    ctx: Arc<Context>,
    buffers: Buffers,
    pool: Mutex<SubAllocator>,
    staging: Mutex<StagingPool>,
}

impl DeviceMemory {
    /// A pool over `ctx`'s device, with blocks of 64 MiB (less where the adapter's
    /// `max_buffer_size` is smaller); requests over half a block get dedicated buffers.
    pub fn new(ctx: Arc<Context>) -> Arc<DeviceMemory> {
        let buffers: Buffers = Arc::default();
        let max = ctx.limits.max_buffer_size.min(usize::MAX as u64) as usize;
        let block = (64usize << 20)
            .min(max.next_power_of_two() / 2)
            .max(1 << 20);
        let config = AllocatorConfig {
            block_size: block,
            grow_in_place: false,
            granule: 1 << 20,
            ..AllocatorConfig::default()
        };
        let provider = WgpuProvider {
            ctx: ctx.clone(),
            buffers: buffers.clone(),
            name: format!("wgpu:{}", ctx.flavor.name()),
            next_handle: 0,
            next_addr: 1 << 32,
            stats: ProviderStats::default(),
        };
        let staging = StagingPool::new(DEFAULT_STAGING_BYTES, ctx.limits.max_buffer_size);
        Arc::new(DeviceMemory {
            ctx,
            buffers,
            pool: Mutex::new(SubAllocator::new(Box::new(provider), config)),
            staging: Mutex::new(staging),
        })
    }

    /// Allocates `bytes` (rounded up to whole words) at the binding alignment; out of memory
    /// trims cached blocks and retries once before failing with the sizes.
    ///
    /// # Errors
    /// [`WgpuError::Limit`] past the adapter's `max_buffer_size`, else
    /// [`WgpuError::OutOfMemory`].
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuffer, WgpuError> {
        let size = bytes.max(4).next_multiple_of(4);
        if size as u64 > self.ctx.limits.max_buffer_size {
            return Err(WgpuError::Limit {
                device: self.ctx.label(),
                what: format!("a {bytes}-byte buffer"),
                limit: format!("max_buffer_size = {}", self.ctx.limits.max_buffer_size),
                hint: "use a smaller batch or an adapter with larger buffers".into(),
            });
        }
        let align = self.ctx.align();
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let allocation = match pool.alloc(size, align) {
            Ok(a) => a,
            Err(_) => {
                pool.trim();
                pool.alloc(size, align)
                    .map_err(|e| WgpuError::OutOfMemory {
                        requested: bytes,
                        in_use: pool.stats().bytes_in_use,
                        message: e.to_string(),
                    })?
            }
        };
        let block = pool
            .block_of(&allocation)
            .ok_or_else(|| WgpuError::Invalid("allocation outside any block".into()))?;
        let offset = (allocation.addr() - block.addr) as u64;
        let buffer = self
            .buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&block.handle)
            .cloned()
            .ok_or_else(|| WgpuError::Invalid("block without a buffer".into()))?;
        Ok(DeviceBuffer {
            mem: self.clone(),
            allocation: Some(allocation),
            buffer,
            offset,
            size: size as u64,
        })
    }

    /// The pool's statistics.
    pub fn stats(&self) -> Stats {
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).stats()
    }

    /// Returns cached empty blocks; the bytes released.
    pub fn trim(&self) -> usize {
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).trim()
    }

    /// The staging pool, sized `budget` bytes ([`crate::WgpuOptions::staging_bytes`]); a
    /// different size than the pool has rebuilds it once its copies completed. Hold the
    /// guard for a whole transfer or run: copies through the pool are ordered by it.
    ///
    /// # Errors
    /// A device failure while waiting for the old pool's copies.
    pub fn staging(&self, budget: usize) -> Result<MutexGuard<'_, StagingPool>, WgpuError> {
        let mut pool = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        if pool.budget() != budget {
            pool.release(&self.ctx)?;
            let stats = pool.stats();
            *pool = StagingPool::new(budget, self.ctx.limits.max_buffer_size);
            pool.carry_stats(stats);
        }
        Ok(pool)
    }

    /// The staging pool's statistics (chunks as provider blocks; see [`StagingPool::stats`]).
    pub fn staging_stats(&self) -> Stats {
        self.staging
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stats()
    }
}

/// A sub-range of one wgpu buffer owned by one holder; returned to the pool on drop.
pub struct DeviceBuffer {
    mem: Arc<DeviceMemory>,
    allocation: Option<Allocation>,
    buffer: wgpu::Buffer,
    offset: u64,
    size: u64,
}

impl DeviceBuffer {
    /// The wgpu buffer the range lives in.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// Byte offset of the range in its buffer (a multiple of the binding alignment).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes of the range (a multiple of 4).
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Some(a) = self.allocation.take() {
            let _ = self
                .mem
                .pool
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .free(a);
        }
    }
}

/// The pools, one per context.
pub fn memory(ctx: &Arc<Context>) -> Arc<DeviceMemory> {
    static POOLS: Mutex<Vec<(crate::probe::Flavor, Arc<DeviceMemory>)>> = Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, m)) = pools.iter().find(|(f, _)| *f == ctx.flavor) {
        return m.clone();
    }
    let m = DeviceMemory::new(ctx.clone());
    pools.push((ctx.flavor, m.clone()));
    m
}
