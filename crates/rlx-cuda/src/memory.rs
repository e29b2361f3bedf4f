//! Device memory on rlx-mem: [`CudaProvider`] hands out raw blocks with `cuMemAlloc` and
//! takes them back with `cuMemFree`, and implements rlx-mem's virtual-memory calls with the
//! driver's VMM API (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap` + `cuMemSetAccess`,
//! `cuMemUnmap`, `cuMemRelease`), so an expandable segment can grow on the device; all pooling (TLSF sub-allocation, cached blocks, stats,
//! out-of-memory trim and retry) is rlx-mem's [`SubAllocator`]. [`DeviceMemory`] is a pool
//! per [`MemoryKind`]: these blocks, or managed ones ([`crate::managed`]). [`Pinned`] is
//! page-locked host memory for staging copies.

use crate::device::CudaDevice;
use crate::managed::{resolve_budget, ManagedProvider, Residency};
use crate::settings::{MemoryKind, MemorySettings};
use crate::CudaError;
use cudarc::driver::{result, sys};
use rlx_mem::{
    Allocation, AllocatorConfig, Block, BlockProvider, ExpandableConfig, GranulePolicy, MemError,
    PhysicalGranule, ProviderStats, Stats, SubAllocator, VirtualRange,
};
use std::sync::{Arc, Mutex, OnceLock};

/// Raw device blocks from the driver.
pub struct CudaProvider {
    stats: ProviderStats,
    /// the VMM granule, queried on first use (`Some(None)`: the driver has no VMM)
    granule: OnceLock<Option<usize>>,
}

impl CudaProvider {
    /// A provider for device 0 (the context must be current when it is called).
    pub fn new() -> CudaProvider {
        CudaProvider {
            stats: ProviderStats::default(),
            granule: OnceLock::new(),
        }
    }
}

/// Device-0 memory, pinned (not migratable), no export handle: what `cuMemCreate` allocates.
fn vmm_prop() -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct for which all-zero is a valid value (no handle types, no flags).
    let mut p: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p
}

fn vmm_fail(requested: usize, call: &str, r: sys::CUresult) -> MemError {
    MemError::ProviderFailed {
        device: "cuda:0".into(),
        requested,
        reason: format!("{call}: {r:?}"),
    }
}

fn vmm_ok(r: sys::CUresult) -> bool {
    r == sys::CUresult::CUDA_SUCCESS
}

impl Default for CudaProvider {
    fn default() -> Self {
        CudaProvider::new()
    }
}

impl BlockProvider for CudaProvider {
    fn name(&self) -> &str {
        "cuda:0"
    }

    fn alloc(&mut self, size: usize, align: usize, exportable: bool) -> Result<Block, MemError> {
        if !align.is_power_of_two() {
            return Err(MemError::BadAlignment { align });
        }
        let fail = |reason: String| MemError::ProviderFailed {
            device: "cuda:0".into(),
            requested: size,
            reason,
        };
        if exportable {
            return Err(fail(
                "exportable CUDA blocks are not implemented yet".into(),
            ));
        }
        // cuMemAlloc aligns to at least 256 bytes; larger alignments over-allocate and round up.
        let extra = align.saturating_sub(256);
        // SAFETY: plain allocation; the context is current (callers bind it).
        let raw = unsafe { result::malloc_sync((size + extra).max(1)) }
            .map_err(|e| fail(format!("cuMemAlloc: {e:?}")))?;
        let addr = (raw as usize).div_ceil(align) * align;
        self.stats.on_alloc(size);
        Ok(Block {
            addr,
            size,
            align,
            exportable,
            handle: raw,
        })
    }

    fn free(&mut self, block: Block) {
        // SAFETY: the block came from `alloc` and is freed once.
        let _ = unsafe { result::free_sync(block.handle) };
        self.stats.on_free(block.size);
    }

    fn stats(&self) -> ProviderStats {
        self.stats
    }

    fn granule_size(&self) -> Option<usize> {
        *self.granule.get_or_init(|| {
            let prop = vmm_prop();
            let mut g = 0usize;
            // SAFETY: out-pointer to a local; `prop` is a valid allocation description.
            let r = unsafe {
                sys::cuMemGetAllocationGranularity(
                    &mut g,
                    &prop,
                    sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )
            };
            (vmm_ok(r) && g.is_power_of_two()).then_some(g)
        })
    }

    fn reserve_virtual(&mut self, size: usize) -> Result<VirtualRange, MemError> {
        let g = self.granule_size().ok_or_else(|| {
            vmm_fail(
                size,
                "cuMemGetAllocationGranularity",
                sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
            )
        })?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: reserves address space only; `ptr` is a local out-pointer.
        let r = unsafe { sys::cuMemAddressReserve(&mut ptr, size, g, 0, 0) };
        if !vmm_ok(r) {
            return Err(vmm_fail(size, "cuMemAddressReserve", r));
        }
        self.stats.vm_reserves += 1;
        Ok(VirtualRange {
            addr: ptr as usize,
            size,
            handle: 0,
        })
    }

    fn release_virtual(&mut self, range: VirtualRange) {
        // SAFETY: the range came from `reserve_virtual` and nothing is mapped in it any more.
        let _ = unsafe { sys::cuMemAddressFree(range.addr as sys::CUdeviceptr, range.size) };
        self.stats.vm_releases += 1;
    }

    fn create_physical(&mut self, size: usize) -> Result<PhysicalGranule, MemError> {
        let g = self.granule_size().unwrap_or(usize::MAX);
        if size == 0 || !size.is_multiple_of(g) {
            return Err(vmm_fail(
                size,
                "cuMemCreate (size not a multiple of the granule)",
                sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            ));
        }
        let prop = vmm_prop();
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: out-pointer to a local; `prop` describes device-0 memory.
        let r = unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) };
        if !vmm_ok(r) {
            return Err(vmm_fail(size, "cuMemCreate", r));
        }
        self.stats.on_create(size);
        Ok(PhysicalGranule { handle, size })
    }

    fn release_physical(&mut self, granule: PhysicalGranule) {
        // SAFETY: the handle came from `create_physical` and is unmapped everywhere.
        let _ = unsafe { sys::cuMemRelease(granule.handle) };
        self.stats.on_release_physical(granule.size);
    }

    fn map(
        &mut self,
        range: &VirtualRange,
        offset: usize,
        granules: &[PhysicalGranule],
    ) -> Result<(), MemError> {
        let total: usize = granules.iter().map(|g| g.size).sum();
        let base = range.addr + offset;
        let mut done = 0usize;
        for g in granules {
            // SAFETY: maps a live physical handle at an unmapped, reserved, granule-aligned place.
            let r =
                unsafe { sys::cuMemMap((base + done) as sys::CUdeviceptr, g.size, 0, g.handle, 0) };
            if !vmm_ok(r) {
                if done > 0 {
                    // SAFETY: undoes the maps above, which all succeeded.
                    let _ = unsafe { sys::cuMemUnmap(base as sys::CUdeviceptr, done) };
                }
                return Err(vmm_fail(total, "cuMemMap", r));
            }
            done += g.size;
        }
        let desc = sys::CUmemAccessDesc {
            location: vmm_prop().location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the span was just mapped; one access descriptor for device 0.
        let r = unsafe { sys::cuMemSetAccess(base as sys::CUdeviceptr, total, &desc, 1) };
        if !vmm_ok(r) {
            // SAFETY: undoes the maps above.
            let _ = unsafe { sys::cuMemUnmap(base as sys::CUdeviceptr, total) };
            return Err(vmm_fail(total, "cuMemSetAccess", r));
        }
        let unit = self.granule_size().unwrap_or(total.max(1));
        self.stats.on_map(total / unit, total);
        Ok(())
    }

    fn unmap(&mut self, range: &VirtualRange, offset: usize, size: usize) {
        // SAFETY: the span was mapped by `map`; kernels using it have finished (the caller's
        // stream-ordered frees guarantee it).
        let _ = unsafe { sys::cuMemUnmap((range.addr + offset) as sys::CUdeviceptr, size) };
        let unit = self.granule_size().unwrap_or(size.max(1));
        self.stats.on_unmap(size / unit, size);
    }
}

/// A device pool: every compiled program, weight and buffer of the process taking memory
/// of one [`MemoryKind`] allocates here.
pub struct DeviceMemory {
    device: Arc<CudaDevice>,
    pool: Mutex<SubAllocator>,
    kind: MemoryKind,
    /// the managed blocks and their places (managed pools only)
    residency: Option<Arc<Residency>>,
}

/// Alignment of every device allocation (cuBLASLt and vector loads want 256 bytes).
pub const ALIGN: usize = 256;

impl DeviceMemory {
    /// The process-wide pool of the kind the settings name (`RLX_CUDA_MEMORY`, see
    /// [`crate::settings`]).
    ///
    /// # Errors
    /// CUDA is unavailable, the settings are malformed, or managed memory is asked for on a
    /// device without it.
    pub fn get() -> Result<Arc<DeviceMemory>, CudaError> {
        DeviceMemory::of(MemorySettings::get()?.memory)
    }

    /// The process-wide pool of `kind` (one per distinct kind, created on first use).
    ///
    /// # Errors
    /// CUDA is unavailable, or managed memory is asked for on a device without it.
    pub fn of(kind: MemoryKind) -> Result<Arc<DeviceMemory>, CudaError> {
        type Pools = Mutex<Vec<(MemoryKind, Arc<DeviceMemory>)>>;
        static POOLS: OnceLock<Pools> = OnceLock::new();
        let mut pools = POOLS
            .get_or_init(|| Mutex::new(Vec::new()))
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some((_, m)) = pools.iter().find(|(k, _)| *k == kind) {
            return Ok(m.clone());
        }
        let device = CudaDevice::get()?;
        device.bind()?;
        let mut config = AllocatorConfig {
            grow_in_place: false,
            ..AllocatorConfig::default()
        };
        if kind == MemoryKind::Device {
            // one expandable segment, grown piece by piece (block mode where VMM is missing)
            config.expandable = Some(ExpandableConfig {
                granules: GranulePolicy::online(),
                ..ExpandableConfig::default()
            });
        }
        let (provider, residency): (Box<dyn BlockProvider>, _) = match kind {
            MemoryKind::Device | MemoryKind::Blocks => (Box::new(CudaProvider::new()), None),
            MemoryKind::Managed(options) => {
                let budget = resolve_budget(options.device_budget, device.facts.memory_bytes);
                let p = ManagedProvider::new(device.raw(), options, budget)?;
                let residency = p.residency();
                (Box::new(p), Some(residency))
            }
        };
        let mem = Arc::new(DeviceMemory {
            device,
            pool: Mutex::new(SubAllocator::new(provider, config)),
            kind,
            residency,
        });
        pools.push((kind, mem.clone()));
        Ok(mem)
    }

    /// Whether this pool grows expandable VMM segments (the device kind where the driver has
    /// the VMM API) rather than allocating blocks.
    pub fn is_expandable(&self) -> bool {
        self.pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_expandable()
    }

    /// A scale hint: about `bytes` will be in use at once (a model's weights and KV cache,
    /// known before they are uploaded), so an expandable segment creates pieces of about
    /// `bytes` / 100 from the start rather than climbing to them (see rlx-mem's
    /// `SubAllocator::expect_peak`). Nothing in block mode.
    pub fn expect_peak(&self, bytes: usize) {
        self.pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .expect_peak(bytes);
    }

    /// The kind of memory this pool hands out.
    pub fn kind(&self) -> MemoryKind {
        self.kind
    }

    /// The managed blocks and their places (None for device memory).
    pub fn residency(&self) -> Option<&Arc<Residency>> {
        self.residency.as_ref()
    }

    /// Enqueues on the device's stream a prefetch to the device of the device-preferred
    /// managed blocks holding `ptrs`; nothing for device memory. Returns the bytes asked
    /// for. Call it outside a graph capture, holding the device's queue.
    ///
    /// # Errors
    /// The driver refuses a prefetch.
    pub fn prefetch(&self, ptrs: &[u64]) -> Result<usize, CudaError> {
        match &self.residency {
            Some(r) => {
                self.device.bind()?;
                r.prefetch(ptrs, &self.device)
            }
            None => Ok(0),
        }
    }

    /// Allocates `bytes` of device memory (cached blocks first; out of memory trims the
    /// cache and retries before failing with the sizes).
    ///
    /// # Errors
    /// [`CudaError::OutOfMemory`] with the request, the bytes in use and the device's free bytes.
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        self.device.bind()?;
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let first = pool.alloc(bytes.max(1), ALIGN);
        let allocation = match first {
            Ok(a) => a,
            Err(_) => {
                pool.trim();
                pool.alloc(bytes.max(1), ALIGN)
                    .map_err(|_| CudaError::OutOfMemory {
                        requested: bytes,
                        in_use: pool.stats().bytes_in_use,
                        free: self.device.mem_info().0,
                    })?
            }
        };
        Ok(DeviceBuffer {
            mem: self.clone(),
            allocation: Some(allocation),
            bytes,
        })
    }

    /// The pool's statistics.
    pub fn stats(&self) -> Stats {
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).stats()
    }

    /// Returns cached empty blocks to the driver; the bytes released.
    pub fn trim(&self) -> usize {
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).trim()
    }
}

/// Device memory owned by one holder; returned to the pool on drop.
pub struct DeviceBuffer {
    mem: Arc<DeviceMemory>,
    allocation: Option<Allocation>,
    bytes: usize,
}

impl DeviceBuffer {
    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.allocation.as_ref().map_or(0, |a| a.addr() as u64)
    }

    /// Bytes requested.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Some(a) = self.allocation.take() {
            // Returning an empty block calls cuMemFree, which needs the context current.
            let _ = self.mem.device.bind();
            let mut pool = self.mem.pool.lock().unwrap_or_else(|e| e.into_inner());
            let _ = pool.free(a);
        }
    }
}

/// Page-locked host memory for staging copies (so copies run asynchronously at full speed).
pub struct Pinned {
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: plain host memory owned by this value.
unsafe impl Send for Pinned {}
// SAFETY: as above; mutation needs `&mut self`.
unsafe impl Sync for Pinned {}

impl Pinned {
    /// Allocates `bytes` of pinned host memory.
    ///
    /// # Errors
    /// The driver refuses (out of host memory).
    pub fn new(device: &CudaDevice, bytes: usize) -> Result<Pinned, CudaError> {
        device.bind()?;
        // SAFETY: allocation only.
        let ptr = unsafe { result::malloc_host(bytes.max(1), 0) }
            .map_err(|e| CudaError::driver(format!("cuMemHostAlloc {bytes} bytes"), e))?;
        Ok(Pinned {
            ptr: ptr as *mut u8,
            bytes,
        })
    }

    /// The bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` holds `bytes` bytes owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }

    /// The bytes, read only.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        let _ = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) };
    }
}
