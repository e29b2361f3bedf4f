//! CUDA↔Vulkan zero-copy, the CUDA half: memory and timeline semaphores another API
//! exported as opaque fds (Vulkan's `VK_KHR_external_memory_fd` and
//! `VK_KHR_external_semaphore_fd`, see `crates/rlx-wgpu/src/interop.rs`) imported into the
//! device's context, so a kernel reads and writes the same bytes and the stream waits for or
//! signals the other queue on the GPU.

use crate::device::CudaDevice;
use crate::CudaError;
use cudarc::driver::{sys, DriverError};
use std::os::fd::{IntoRawFd, OwnedFd};
use std::sync::Arc;

fn check(call: &str, r: sys::CUresult) -> Result<(), CudaError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::driver(call, DriverError(r)))
    }
}

/// The device's UUID as `cuDeviceGetUuid` gives it, to match against Vulkan's
/// `deviceUUID` (an import is only valid on the same physical GPU).
///
/// # Errors
/// The driver refuses.
pub fn device_uuid(device: &CudaDevice) -> Result<[u8; 16], CudaError> {
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: `uuid` is a valid out-pointer; the device handle is valid.
    check("cuDeviceGetUuid_v2", unsafe {
        sys::cuDeviceGetUuid_v2(&mut uuid, device.raw())
    })?;
    Ok(uuid.bytes.map(|b| b as u8))
}

/// Memory imported from an opaque fd and mapped as one device pointer over all of it.
/// Destroying it unmaps and releases CUDA's reference; the exporter keeps its own.
pub struct ExternalBuffer {
    external: sys::CUexternalMemory,
    ptr: u64,
    size: u64,
    device: Arc<CudaDevice>,
}

// SAFETY: the handles are plain driver handles, usable from any thread with the context bound.
unsafe impl Send for ExternalBuffer {}
// SAFETY: as above; nothing is mutated through `&self`.
unsafe impl Sync for ExternalBuffer {}

impl ExternalBuffer {
    /// Imports `fd` (ownership passes to the driver on success) as `allocation_bytes` of
    /// external memory (the exporter's allocation size; `dedicated` when it was a dedicated
    /// allocation, as Vulkan's exportable buffers are) and maps `size` bytes from offset 0.
    ///
    /// # Errors
    /// The driver refuses the import or the mapping (e.g. the memory is on another GPU).
    pub fn import(
        device: &Arc<CudaDevice>,
        fd: OwnedFd,
        allocation_bytes: u64,
        size: u64,
        dedicated: bool,
    ) -> Result<ExternalBuffer, CudaError> {
        device.bind()?;
        // SAFETY: the handle type is written before the struct is read; every other field
        // (integers, pointers, a union of them) is valid as zeros.
        let mut desc: sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC = unsafe {
            zeroed_with(|d: *mut sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC| {
                std::ptr::addr_of_mut!((*d).type_).write(
                    sys::CUexternalMemoryHandleType::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
                )
            })
        };
        let raw_fd = fd.into_raw_fd();
        desc.handle.fd = raw_fd;
        desc.size = allocation_bytes;
        desc.flags = if dedicated {
            sys::CUDA_EXTERNAL_MEMORY_DEDICATED
        } else {
            0
        };
        let mut external: sys::CUexternalMemory = std::ptr::null_mut();
        // SAFETY: `desc` is filled in; on success the driver owns `raw_fd`.
        let r = unsafe { sys::cuImportExternalMemory(&mut external, &desc) };
        if r != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: on failure the fd is still ours to close.
            drop(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw_fd) });
            return Err(CudaError::driver(
                format!("cuImportExternalMemory (opaque fd, {allocation_bytes} bytes)"),
                DriverError(r),
            ));
        }
        // SAFETY: as above.
        let mut map: sys::CUDA_EXTERNAL_MEMORY_BUFFER_DESC = unsafe { std::mem::zeroed() };
        map.offset = 0;
        map.size = size;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: `external` was just imported and holds at least `size` bytes.
        let r = unsafe { sys::cuExternalMemoryGetMappedBuffer(&mut ptr, external, &map) };
        if r != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: nothing is mapped from it.
            unsafe { sys::cuDestroyExternalMemory(external) };
            return Err(CudaError::driver(
                format!("cuExternalMemoryGetMappedBuffer ({size} bytes)"),
                DriverError(r),
            ));
        }
        Ok(ExternalBuffer {
            external,
            ptr,
            size,
            device: device.clone(),
        })
    }

    /// The device pointer over the imported memory.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes mapped at [`ExternalBuffer::ptr`].
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Drop for ExternalBuffer {
    fn drop(&mut self) {
        // Work on the stream may still touch the memory.
        let _ = self.device.bind();
        let _ = self.device.sync();
        // SAFETY: the mapping came from `cuExternalMemoryGetMappedBuffer` and is freed once,
        // before the external memory it maps.
        unsafe {
            sys::cuMemFree_v2(self.ptr);
            sys::cuDestroyExternalMemory(self.external);
        }
    }
}

/// A timeline semaphore imported from an opaque fd: the device's stream signals values the
/// other API's queue waits for, and waits for values it signals.
pub struct ExternalSemaphore {
    semaphore: sys::CUexternalSemaphore,
    device: Arc<CudaDevice>,
}

// SAFETY: as for `ExternalBuffer`.
unsafe impl Send for ExternalSemaphore {}
// SAFETY: as above.
unsafe impl Sync for ExternalSemaphore {}

impl ExternalSemaphore {
    /// Imports `fd` (ownership passes to the driver on success) as a timeline semaphore.
    ///
    /// # Errors
    /// The driver refuses the import.
    pub fn import(device: &Arc<CudaDevice>, fd: OwnedFd) -> Result<ExternalSemaphore, CudaError> {
        device.bind()?;
        // SAFETY: as in `ExternalBuffer::import`: the handle type (an enum without a zero
        // value) is written first.
        let mut desc: sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC = unsafe {
            zeroed_with(|d: *mut sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC| {
                std::ptr::addr_of_mut!((*d).type_).write(
                    sys::CUexternalSemaphoreHandleType::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD,
                )
            })
        };
        let raw_fd = fd.into_raw_fd();
        desc.handle.fd = raw_fd;
        let mut semaphore: sys::CUexternalSemaphore = std::ptr::null_mut();
        // SAFETY: `desc` is filled in; on success the driver owns `raw_fd`.
        let r = unsafe { sys::cuImportExternalSemaphore(&mut semaphore, &desc) };
        if r != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: on failure the fd is still ours to close.
            drop(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw_fd) });
            return Err(CudaError::driver(
                "cuImportExternalSemaphore (timeline, opaque fd)",
                DriverError(r),
            ));
        }
        Ok(ExternalSemaphore {
            semaphore,
            device: device.clone(),
        })
    }

    /// Signals `value` on the device's stream once the work enqueued before it is done.
    ///
    /// # Errors
    /// The driver refuses.
    pub fn signal(&self, value: u64) -> Result<(), CudaError> {
        self.device.bind()?;
        // SAFETY: all-zero is a valid value; the fence value is set below.
        let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS = unsafe { std::mem::zeroed() };
        params.params.fence.value = value;
        // SAFETY: one live semaphore and its parameters; the stream is the device's.
        check(
            &format!("cuSignalExternalSemaphoresAsync (value {value})"),
            unsafe {
                sys::cuSignalExternalSemaphoresAsync(
                    &self.semaphore,
                    &params,
                    1,
                    self.device.stream(),
                )
            },
        )
    }

    /// Makes the device's stream wait (on the GPU) until the semaphore reaches `value`.
    ///
    /// # Errors
    /// The driver refuses.
    pub fn wait(&self, value: u64) -> Result<(), CudaError> {
        self.device.bind()?;
        // SAFETY: all-zero is a valid value; the fence value is set below.
        let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS = unsafe { std::mem::zeroed() };
        params.params.fence.value = value;
        // SAFETY: as in `signal`.
        check(
            &format!("cuWaitExternalSemaphoresAsync (value {value})"),
            unsafe {
                sys::cuWaitExternalSemaphoresAsync(
                    &self.semaphore,
                    &params,
                    1,
                    self.device.stream(),
                )
            },
        )
    }
}

impl Drop for ExternalSemaphore {
    fn drop(&mut self) {
        let _ = self.device.bind();
        let _ = self.device.sync();
        // SAFETY: nothing on the stream names the semaphore any more.
        unsafe { sys::cuDestroyExternalSemaphore(self.semaphore) };
    }
}

/// A C struct with every byte zero except what `init` writes through the pointer first: for
/// the driver's descriptors whose enum fields have no zero value, which `std::mem::zeroed`
/// refuses (it panics) and which must be valid before the struct is read.
///
/// # Safety
/// After `init`, every field of `T` must be valid: zero bytes for those `init` leaves.
unsafe fn zeroed_with<T>(init: impl FnOnce(*mut T)) -> T {
    let mut v = std::mem::MaybeUninit::<T>::zeroed();
    init(v.as_mut_ptr());
    // SAFETY: the caller's contract.
    unsafe { v.assume_init() }
}
