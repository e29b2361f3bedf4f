//! The NVRTC modules a program's kernels were compiled into, and which module holds each
//! function.

use crate::device::{Function, Module};
use crate::CudaError;
use std::collections::HashMap;

/// The loaded modules of a program and which holds each function.
#[derive(Default)]
pub(super) struct Modules {
    list: Vec<Module>,
    of: HashMap<String, usize>,
}

impl Modules {
    /// Adds a loaded module holding functions `names`.
    pub(super) fn add(&mut self, module: Module, names: &[String]) {
        for n in names {
            self.of.insert(n.clone(), self.list.len());
        }
        self.list.push(module);
    }

    /// Function `name` from the module that holds it (see [`Module::function`]).
    pub(super) fn function(&self, name: &str, shared_bytes: u32) -> Result<Function, CudaError> {
        let m = self
            .of
            .get(name)
            .and_then(|&i| self.list.get(i))
            .ok_or_else(|| CudaError::Invalid(format!("no module holds function {name}")))?;
        m.function(name, shared_bytes)
    }
}
