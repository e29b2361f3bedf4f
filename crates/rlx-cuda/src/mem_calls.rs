//! The raw driver calls behind managed memory and staging, in one place: managed
//! allocation, advice and prefetch (`cuMemAllocManaged`, `cuMemAdvise_v2`,
//! `cuMemPrefetchAsync_v2`), range queries, and events used as completion marks. Each
//! failure is a [`CudaError::Driver`] naming the call. cudarc loads every entry point on first
//! use and panics when the driver lacks it, so the newer ones are looked up first
//! ([`ManagedCaps::query`]) and a missing one is an error, never a panic. Callers bind the
//! device's context on their thread first ([`crate::device::CudaDevice::bind`]).

use crate::device::CudaDevice;
use crate::CudaError;
use cudarc::driver::{result, sys};

/// Whether the driver has entry point `name` (the library is loaded: the probe succeeded).
fn has_symbol(name: &str) -> bool {
    // SAFETY: looks a name up in the driver library the probe already loaded; nothing is
    // called through the symbol.
    unsafe {
        sys::culib()
            .get::<unsafe extern "C" fn()>(name.as_bytes())
            .is_ok()
    }
}

/// What the device and driver offer for managed memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManagedCaps {
    /// `cuMemAllocManaged` works on the device
    pub managed: bool,
    /// the device and host may touch managed memory at once, and the driver migrates pages on
    /// demand (Linux, Pascal and newer): what oversubscription, prefetch and advice need
    pub concurrent: bool,
    /// `cuMemAdvise_v2` and `cuMemPrefetchAsync_v2` exist (driver 12.2 or newer)
    pub hints: bool,
}

impl ManagedCaps {
    /// Asks the driver about device `device`.
    ///
    /// # Errors
    /// The attribute queries fail.
    pub fn query(device: sys::CUdevice) -> Result<ManagedCaps, CudaError> {
        use sys::CUdevice_attribute::*;
        let attr = |a, what: &str| {
            // SAFETY: `device` is a valid handle from cuDeviceGet.
            unsafe { result::device::get_attribute(device, a) }
                .map_err(|e| CudaError::driver(format!("cuDeviceGetAttribute {what}"), e))
        };
        let managed = attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, "MANAGED_MEMORY")? != 0;
        let concurrent = attr(
            CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
            "CONCURRENT_MANAGED_ACCESS",
        )? != 0;
        Ok(ManagedCaps {
            managed,
            concurrent,
            hints: has_symbol("cuMemAdvise_v2") && has_symbol("cuMemPrefetchAsync_v2"),
        })
    }

    /// True when advice and prefetch may be given (they are hints: without them managed
    /// memory still works, pages move on fault).
    pub fn can_hint(&self) -> bool {
        self.managed && self.concurrent && self.hints
    }
}

/// A place pages can live: device `ordinal`, or host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Place {
    /// the device of this ordinal
    Device(i32),
    /// host memory
    Host,
}

impl Place {
    fn location(self) -> sys::CUmemLocation {
        match self {
            Place::Device(id) => sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id,
            },
            // The id is ignored for the host location.
            Place::Host => sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
                id: 0,
            },
        }
    }
}

/// Allocates `bytes` of managed memory, reachable from every stream (`CU_MEM_ATTACH_GLOBAL`).
///
/// # Errors
/// The driver refuses (no managed memory on the device, or host and swap exhausted).
pub fn alloc_managed(bytes: usize) -> Result<u64, CudaError> {
    // SAFETY: plain allocation; the caller bound the context.
    unsafe { result::malloc_managed(bytes.max(1), sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
        .map_err(|e| CudaError::driver(format!("cuMemAllocManaged {bytes} bytes"), e))
}

/// Frees memory from [`alloc_managed`] (or `cuMemAlloc`). Work using it must have finished.
///
/// # Errors
/// The driver refuses (a bad pointer, or a sticky error from earlier work).
pub fn free(ptr: u64) -> Result<(), CudaError> {
    // SAFETY: the caller owns `ptr`, frees it once, and no work on it is pending.
    unsafe { result::free_sync(ptr) }.map_err(|e| CudaError::driver("cuMemFree", e))
}

/// One piece of advice for a managed range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// the pages' home: they migrate there when evicted elsewhere and stay there when touched
    /// from a place that can map them
    PreferredLocation(Place),
    /// map the pages on this place's page tables, so it reads them where they are
    /// instead of faulting them over
    AccessedBy(Place),
}

/// Gives the driver `advice` for `bytes` from `ptr` (managed memory).
///
/// # Errors
/// The driver lacks `cuMemAdvise_v2` (older than 12.2) or refuses.
pub fn advise(ptr: u64, bytes: usize, advice: Advice) -> Result<(), CudaError> {
    use sys::CUmem_advise::*;
    let (what, place, name) = match advice {
        Advice::PreferredLocation(p) => (CU_MEM_ADVISE_SET_PREFERRED_LOCATION, p, "preferred"),
        Advice::AccessedBy(p) => (CU_MEM_ADVISE_SET_ACCESSED_BY, p, "accessed-by"),
    };
    let call = format!("cuMemAdvise_v2 {name} {place:?} ({bytes} bytes at {ptr:#x})");
    if !has_symbol("cuMemAdvise_v2") {
        return Err(CudaError::Driver {
            call,
            message: "the driver has no cuMemAdvise_v2 (it needs CUDA 12.2 or newer)".into(),
        });
    }
    // SAFETY: `ptr..ptr + bytes` is managed memory the caller owns; the symbol exists.
    unsafe { result::mem_advise(ptr, bytes, what, place.location()) }
        .map_err(|e| CudaError::driver(call, e))
}

/// Enqueues a migration of `bytes` from `ptr` (managed memory) to `place` on `device`'s stream.
/// Not capturable in a CUDA graph: call it outside a capture.
///
/// # Errors
/// The driver lacks `cuMemPrefetchAsync_v2` (older than 12.2) or refuses.
pub fn prefetch(
    ptr: u64,
    bytes: usize,
    place: Place,
    device: &CudaDevice,
) -> Result<(), CudaError> {
    let call = format!("cuMemPrefetchAsync_v2 {place:?} ({bytes} bytes at {ptr:#x})");
    if !has_symbol("cuMemPrefetchAsync_v2") {
        return Err(CudaError::Driver {
            call,
            message: "the driver has no cuMemPrefetchAsync_v2 (it needs CUDA 12.2 or newer)".into(),
        });
    }
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: the range is managed memory the caller owns; the stream is valid; the symbol
    // exists.
    unsafe { result::mem_prefetch_async(ptr, bytes, place.location(), device.stream()) }
        .map_err(|e| CudaError::driver(call, e))
}

/// Where the driver says `bytes` from `ptr` prefer to live: `Some(place)` when the whole
/// range has one preferred location, None when it has none or several.
///
/// # Errors
/// The driver refuses (not managed memory).
pub fn preferred_location(ptr: u64, bytes: usize) -> Result<Option<Place>, CudaError> {
    range_place(
        ptr,
        bytes,
        sys::CUmem_range_attribute::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
        "preferred location",
    )
}

/// Where `bytes` from `ptr` were last prefetched to, as [`preferred_location`] answers.
///
/// # Errors
/// The driver refuses (not managed memory).
pub fn last_prefetch_location(ptr: u64, bytes: usize) -> Result<Option<Place>, CudaError> {
    range_place(
        ptr,
        bytes,
        sys::CUmem_range_attribute::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
        "last prefetch location",
    )
}

fn range_place(
    ptr: u64,
    bytes: usize,
    attribute: sys::CUmem_range_attribute,
    what: &str,
) -> Result<Option<Place>, CudaError> {
    let mut value: i32 = 0;
    // SAFETY: a 4-byte out-value, as these attributes return; the range is the caller's.
    unsafe {
        sys::cuMemRangeGetAttribute(
            &mut value as *mut i32 as *mut std::ffi::c_void,
            4,
            attribute,
            ptr,
            bytes,
        )
    }
    .result()
    .map_err(|e| CudaError::driver(format!("cuMemRangeGetAttribute {what}"), e))?;
    // -1 is CU_DEVICE_CPU, -2 CU_DEVICE_INVALID (none, or not the same over the range).
    Ok(match value {
        -1 => Some(Place::Host),
        v if v >= 0 => Some(Place::Device(v)),
        _ => None,
    })
}

/// An event without timing, recorded on a stream to learn when the work before it finished;
/// destroyed on drop.
pub struct Mark {
    event: sys::CUevent,
}

// SAFETY: event handles may be used from any thread with the context current.
unsafe impl Send for Mark {}

impl Mark {
    /// A new event (`CU_EVENT_DISABLE_TIMING`, the cheapest kind).
    ///
    /// # Errors
    /// The driver refuses.
    pub fn new() -> Result<Mark, CudaError> {
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(|e| CudaError::driver("cuEventCreate", e))?;
        Ok(Mark { event })
    }

    /// Records the mark after the work enqueued so far on `device`'s stream.
    ///
    /// # Errors
    /// The driver refuses.
    pub fn record(&self, device: &CudaDevice) -> Result<(), CudaError> {
        // SAFETY: both handles are valid.
        unsafe { result::event::record(self.event, device.stream()) }
            .map_err(|e| CudaError::driver("cuEventRecord", e))
    }

    /// Whether the work before the mark has finished (without waiting).
    ///
    /// # Errors
    /// A failure of that work, reported by the driver.
    pub fn is_done(&self) -> Result<bool, CudaError> {
        // SAFETY: the event is valid.
        match unsafe { sys::cuEventQuery(self.event) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => r
                .result()
                .map(|_| true)
                .map_err(|e| CudaError::driver("cuEventQuery", e)),
        }
    }

    /// Waits until the work before the mark has finished.
    ///
    /// # Errors
    /// A failure of that work, reported by the driver.
    pub fn wait(&self) -> Result<(), CudaError> {
        // SAFETY: the event is valid.
        unsafe { result::event::synchronize(self.event) }
            .map_err(|e| CudaError::driver("cuEventSynchronize", e))
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once (pending work releases it when done).
        let _ = unsafe { result::event::destroy(self.event) };
    }
}
