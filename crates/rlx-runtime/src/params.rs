//! Weights shared by every graph compiled in one session.

use rlx_ir::Tensor;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// An immutable set of weights by name; a run holds one for its whole duration.
pub type ParamMap = HashMap<String, Arc<Tensor>>;

/// Named weights, shared (not copied) by every compiled graph of a session.
#[derive(Debug, Clone, Default)]
pub struct ParamStore {
    inner: Arc<RwLock<Arc<ParamMap>>>,
}

impl ParamStore {
    /// An empty store.
    pub fn new() -> ParamStore {
        ParamStore::default()
    }

    /// Sets or replaces a weight. Runs in flight keep the values they started with.
    pub fn set(&self, name: &str, value: Arc<Tensor>) {
        let mut guard = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let mut map = (**guard).clone();
        map.insert(name.to_string(), value);
        *guard = Arc::new(map);
    }

    /// A store holding exactly `map` (not shared with any other store).
    pub fn from_map(map: ParamMap) -> ParamStore {
        ParamStore {
            inner: Arc::new(RwLock::new(Arc::new(map))),
        }
    }

    /// One weight.
    pub fn get(&self, name: &str) -> Option<Arc<Tensor>> {
        self.snapshot().get(name).cloned()
    }

    /// A consistent view of all weights, cheap to take per run.
    pub fn snapshot(&self) -> Arc<ParamMap> {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Total bytes of all weights.
    pub fn size_bytes(&self) -> usize {
        self.snapshot().values().map(|t| t.size_bytes()).sum()
    }
}
