//! The CPU device's buffers: host memory from one process-wide rlx-mem pool (TLSF over the
//! host provider, so its statistics count every buffer), or memory someone else owns (a
//! numpy array through DLPack). A lock per storage keeps a host-side write from racing a
//! run that reads the same bytes in place.

use crate::{BufferStorage, RawHandle, RuntimeError};
use rlx_mem::{Allocation, AllocatorConfig, HostProvider, Stats, SubAllocator};
use std::any::Any;
use std::sync::{Mutex, OnceLock, RwLock};

/// Alignment of pooled host buffers (a cache line, and every element type's).
const ALIGN: usize = 64;

fn pool() -> &'static Mutex<SubAllocator> {
    static POOL: OnceLock<Mutex<SubAllocator>> = OnceLock::new();
    POOL.get_or_init(|| {
        Mutex::new(SubAllocator::new(
            Box::new(HostProvider::new()),
            AllocatorConfig::default(),
        ))
    })
}

/// Statistics of the CPU buffer pool.
pub(crate) fn stats() -> Stats {
    pool().lock().unwrap_or_else(|e| e.into_inner()).stats()
}

/// Who owns the bytes.
enum Owner {
    /// the pool, returned on drop
    Pool(Option<Allocation>),
    /// a foreign owner, dropped with the storage
    Foreign(#[allow(dead_code)] Box<dyn Any + Send + Sync>),
}

/// Host bytes of one or more CPU buffers.
pub(crate) struct HostMemory {
    ptr: *mut u8,
    len: usize,
    owner: Owner,
    /// read by runs that borrow the bytes; written by uploads, fills and output copies
    pub(crate) lock: RwLock<()>,
}

// SAFETY: the bytes are plain memory owned by `owner`; every access goes through `lock`.
unsafe impl Send for HostMemory {}
// SAFETY: as above.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// `bytes` from the pool (zeroed where the provider zeroes pages; unspecified otherwise).
    pub(crate) fn alloc(bytes: usize) -> Result<HostMemory, RuntimeError> {
        let mut pool = pool().lock().unwrap_or_else(|e| e.into_inner());
        let allocation = pool.alloc(bytes.max(1), ALIGN).map_err(|e| {
            RuntimeError::Buffer(format!("allocating {bytes} bytes of host memory: {e}"))
        })?;
        Ok(HostMemory {
            ptr: allocation.addr() as *mut u8,
            len: bytes,
            owner: Owner::Pool(Some(allocation)),
            lock: RwLock::new(()),
        })
    }

    /// Foreign memory: `len` bytes at `ptr`, alive while `owner` is.
    ///
    /// # Safety
    /// `ptr` is valid for reads and writes of `len` bytes while `owner` lives.
    pub(crate) unsafe fn foreign(
        ptr: *mut u8,
        len: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> HostMemory {
        HostMemory {
            ptr,
            len,
            owner: Owner::Foreign(owner),
            lock: RwLock::new(()),
        }
    }

    /// `len` bytes from `offset`, read in place (the caller holds `lock` for reading).
    pub(crate) fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        if len == 0 {
            return &[];
        }
        debug_assert!(offset + len <= self.len);
        // SAFETY: within the storage (checked when the view was made); writers hold the
        // write lock, which the caller excludes by holding the read lock.
        unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) }
    }

    /// `len` bytes from `offset` to write (the caller holds `lock` for writing).
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn bytes_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        if len == 0 {
            return &mut [];
        }
        debug_assert!(offset + len <= self.len);
        // SAFETY: within the storage; the caller's write lock makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) }
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        if let Owner::Pool(a) = &mut self.owner {
            if let Some(a) = a.take() {
                let _ = pool().lock().unwrap_or_else(|e| e.into_inner()).free(a);
            }
        }
    }
}

impl BufferStorage for HostMemory {
    fn bytes(&self) -> usize {
        self.len
    }

    fn handle(&self) -> RawHandle {
        RawHandle::Host(self.ptr as usize)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
