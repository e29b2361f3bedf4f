//! Weights on the device, shared by every program compiled for one session: one device
//! range per (param name, byte size), allocated at compile time so bind groups can be
//! built then, and re-uploaded only when the session's tensor for that name changes (a
//! different `Arc`).

use crate::memory::{DeviceBuffer, DeviceMemory};
use crate::WgpuError;
use rlx_ir::Tensor;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One weight's device copy and the host tensor it was last uploaded from.
pub struct WeightSlot {
    /// the device range
    pub buffer: DeviceBuffer,
    uploaded: Mutex<Option<Arc<Tensor>>>,
}

impl WeightSlot {
    /// True when `t` is not the tensor last uploaded; records `t` as uploaded.
    pub fn needs_upload(&self, t: &Arc<Tensor>) -> bool {
        let mut last = self.uploaded.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_ref().is_some_and(|l| Arc::ptr_eq(l, t)) {
            return false;
        }
        *last = Some(t.clone());
        true
    }

    /// Forgets the last upload.
    pub fn invalidate(&self) {
        *self.uploaded.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// The session's device weights.
#[derive(Default)]
pub struct WeightCache {
    slots: Mutex<HashMap<(String, usize), Arc<WeightSlot>>>,
}

impl WeightCache {
    /// An empty cache.
    pub fn new() -> WeightCache {
        WeightCache::default()
    }

    /// The slot for `name` of `bytes` bytes, allocated on first use.
    ///
    /// # Errors
    /// Out of device memory.
    pub fn slot(
        &self,
        mem: &Arc<DeviceMemory>,
        name: &str,
        bytes: usize,
    ) -> Result<Arc<WeightSlot>, WgpuError> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = slots.get(&(name.to_string(), bytes)) {
            return Ok(s.clone());
        }
        let slot = Arc::new(WeightSlot {
            buffer: mem.alloc(bytes)?,
            uploaded: Mutex::new(None),
        });
        slots.insert((name.to_string(), bytes), slot.clone());
        Ok(slot)
    }

    /// Bytes held on the device.
    pub fn bytes(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|s| s.buffer.size() as usize)
            .sum()
    }
}

/// The raw little-endian bytes of a host tensor, padded with zeros to whole 32-bit words.
pub fn tensor_words(t: &Tensor) -> Vec<u8> {
    use rlx_ir::TensorData as D;
    fn raw<T>(v: &[T]) -> &[u8] {
        // SAFETY: plain-old-data element types with no padding; bools are 0 or 1 bytes.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
    }
    let bytes = match t.data() {
        D::F32(v) => raw(v),
        D::F16(v) => raw(v),
        D::BF16(v) => raw(v),
        D::F64(v) => raw(v),
        D::I8(v) => raw(v),
        D::U8(v) => raw(v),
        D::I32(v) => raw(v),
        D::I64(v) => raw(v),
        D::Bool(v) => raw(v),
    };
    let mut out = bytes.to_vec();
    out.resize(bytes.len().max(4).next_multiple_of(4), 0);
    out
}
