//! A weight operand packed once per bound tensor, for the integer products
//! (`int_matmul`, `int_conv`): a constant is packed at compile, a param when first bound and
//! again only when another tensor is bound under its name.

use super::WeightSource;
use crate::CpuError;
use rlx_ir::Tensor;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Where a weight comes from and its packing `P` for the tensor last bound (kept alive, so
/// pointer identity is sound).
#[derive(Debug)]
pub(crate) struct PackedWeight<P> {
    source: Option<WeightSource>,
    cache: Mutex<Option<(Arc<Tensor>, Arc<P>)>>,
}

impl<P> PackedWeight<P> {
    /// A weight from `source` (None: the operand is computed, packed every run).
    pub fn new(source: Option<WeightSource>) -> Self {
        PackedWeight {
            source,
            cache: Mutex::new(None),
        }
    }

    /// Packs a constant weight now with `pack` (None: left to the first run, which reports
    /// the error); nothing for a param or a computed operand.
    pub fn prepack(&self, pack: impl FnOnce(&Tensor) -> Option<P>) {
        if let Some(WeightSource::Constant(t)) = &self.source {
            if let Some(p) = pack(t) {
                *self.cache.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((t.clone(), Arc::new(p)));
            }
        }
    }

    /// The packing for this run: the cached one while the same tensor is bound, else
    /// `fresh()` (kept when the operand is a weight).
    ///
    /// # Errors
    /// A param that is not bound, or what `fresh` returns.
    pub fn get(
        &self,
        params: &HashMap<String, Arc<Tensor>>,
        fresh: impl FnOnce() -> Result<P, CpuError>,
    ) -> Result<Arc<P>, CpuError> {
        let bound = match &self.source {
            None => return fresh().map(Arc::new),
            Some(WeightSource::Constant(t)) => t.clone(),
            Some(WeightSource::Param(name)) => {
                params.get(name).cloned().ok_or_else(|| CpuError::Missing {
                    kind: "param",
                    name: name.clone(),
                })?
            }
        };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((t, p)) = &*cache {
            if Arc::ptr_eq(t, &bound) {
                return Ok(p.clone());
            }
        }
        let p = Arc::new(fresh()?);
        *cache = Some((bound, p.clone()));
        Ok(p)
    }
}
