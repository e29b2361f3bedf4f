//! Device copies of named host values (a session's weights), shared by every program a
//! backend compiles for that session: one device buffer per (name, byte size), allocated at
//! compile time so captured launches and bind groups can refer to it, and re-uploaded only
//! when the host value for that name is a different `Arc` than the one last uploaded.
//! Generic over the device buffer `B` and the host value `H`, so every backend shares it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One weight's device buffer and the host value it was last uploaded from.
pub struct WeightSlot<B, H> {
    buffer: B,
    bytes: usize,
    uploaded: Mutex<Option<Arc<H>>>,
}

impl<B, H> WeightSlot<B, H> {
    /// The device buffer.
    pub fn buffer(&self) -> &B {
        &self.buffer
    }

    /// Its size in bytes, as requested.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// True when `host` is not the value last uploaded (so it must be uploaded now); records
    /// `host` as uploaded.
    pub fn needs_upload(&self, host: &Arc<H>) -> bool {
        let mut last = lock(&self.uploaded);
        if last.as_ref().is_some_and(|l| Arc::ptr_eq(l, host)) {
            return false;
        }
        *last = Some(host.clone());
        true
    }

    /// Forgets the last upload (after a failed copy), so the next run uploads again.
    pub fn invalidate(&self) {
        *lock(&self.uploaded) = None;
    }
}

/// Slots keyed by (name, byte size).
type Slots<B, H> = HashMap<(String, usize), Arc<WeightSlot<B, H>>>;

/// A session's device weights, keyed by (name, byte size).
pub struct WeightCache<B, H> {
    slots: Mutex<Slots<B, H>>,
}

impl<B, H> Default for WeightCache<B, H> {
    fn default() -> Self {
        WeightCache {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

impl<B, H> WeightCache<B, H> {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The slot for `name` of `bytes` bytes; on first use its buffer comes from `alloc`.
    ///
    /// # Errors
    /// Whatever `alloc` returns (out of device memory); nothing is cached then.
    pub fn slot<E>(
        &self,
        name: &str,
        bytes: usize,
        alloc: impl FnOnce(usize) -> Result<B, E>,
    ) -> Result<Arc<WeightSlot<B, H>>, E> {
        let mut slots = lock(&self.slots);
        let key = (name.to_string(), bytes);
        if let Some(s) = slots.get(&key) {
            return Ok(s.clone());
        }
        let slot = Arc::new(WeightSlot {
            buffer: alloc(bytes)?,
            bytes,
            uploaded: Mutex::new(None),
        });
        slots.insert(key, slot.clone());
        Ok(slot)
    }

    /// Bytes held on the device.
    pub fn bytes(&self) -> usize {
        lock(&self.slots).values().map(|s| s.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_slot_per_name_and_size_and_uploads_only_on_change() {
        let cache: WeightCache<Vec<u8>, u32> = WeightCache::new();
        let mut allocs = 0;
        let mut alloc = |n: usize| -> Result<Vec<u8>, ()> {
            allocs += 1;
            Ok(vec![0; n])
        };
        let a = cache.slot("w", 16, &mut alloc).unwrap();
        let b = cache.slot("w", 16, &mut alloc).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        cache.slot("w", 32, &mut alloc).unwrap();
        assert_eq!(allocs, 2);
        assert_eq!(cache.bytes(), 48);
        assert_eq!(a.buffer().len(), 16);

        let v1 = Arc::new(1u32);
        assert!(a.needs_upload(&v1));
        assert!(!a.needs_upload(&v1));
        let v2 = Arc::new(1u32);
        assert!(a.needs_upload(&v2), "a different Arc uploads again");
        a.invalidate();
        assert!(a.needs_upload(&v2));
    }

    #[test]
    fn failed_allocation_is_not_cached() {
        let cache: WeightCache<Vec<u8>, u32> = WeightCache::new();
        assert_eq!(
            cache.slot("w", 8, |_| Err::<Vec<u8>, _>("oom")).err(),
            Some("oom")
        );
        assert_eq!(cache.bytes(), 0);
        assert!(cache.slot("w", 8, |n| Ok::<_, ()>(vec![0u8; n])).is_ok());
    }
}
