//! `DynamicGraph`: a model whose input dims are bound from the inputs of every run. The
//! graph is rebuilt and compiled once per distinct set of symbol sizes (a shape signature)
//! and kept in a bounded least-recently-used cache.
//!
//! The runtime knows nothing of where the graph comes from: a [`Specialiser`] builds the
//! graph and its weights for one set of sizes (the ONNX importer with dims bound, for
//! example), so ops that need static shapes work whatever the sizes.

use crate::session::{bind_inputs, bind_values, Bindings};
use crate::{Binding, CompileOptions, CompiledGraph, RuntimeError, Session};
use rlx_ir::{Graph, Tensor, TensorType};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// How many shape signatures a [`DynamicGraph`] keeps compiled unless told otherwise.
pub const DEFAULT_CACHE_SIZE: usize = 8;

/// An error a [`Specialiser`] returns.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a specialiser builds for one shape signature: a graph whose inputs have only static
/// dims, and the weights it binds.
pub struct Specialised {
    /// the graph
    pub graph: Graph,
    /// weights by param name (shared: the same `Arc` each time is set once)
    pub params: Vec<(String, Arc<Tensor>)>,
}

/// Builds the graph for one set of symbol sizes.
pub type Specialiser = Box<dyn Fn(&Bindings) -> Result<Specialised, BoxError> + Send + Sync>;

/// A model compiled per shape signature of its inputs, runnable from several threads.
pub struct DynamicGraph {
    session: Session,
    inputs: Vec<(String, TensorType)>,
    build: Specialiser,
    options: CompileOptions,
    capacity: usize,
    cache: Mutex<Cache>,
}

/// Compiled graphs by signature, with the tick of their last use.
#[derive(Default)]
struct Cache {
    tick: u64,
    entries: BTreeMap<Bindings, (u64, Arc<CompiledGraph>)>,
    compiles: usize,
    last_compile_ms: Option<f64>,
}

impl Session {
    /// A model whose symbolic input dims (declared in `inputs`) are bound from every run's
    /// inputs: `build` makes the graph for each new set of sizes, compiled with `options`
    /// and cached ([`DEFAULT_CACHE_SIZE`] signatures; see [`DynamicGraph::with_capacity`]).
    pub fn dynamic(
        &self,
        inputs: Vec<(String, TensorType)>,
        build: Specialiser,
        options: CompileOptions,
    ) -> DynamicGraph {
        DynamicGraph {
            session: self.clone(),
            inputs,
            build,
            options,
            capacity: DEFAULT_CACHE_SIZE,
            cache: Mutex::new(Cache::default()),
        }
    }
}

impl DynamicGraph {
    /// The same model keeping at most `n` (at least 1) compiled signatures.
    pub fn with_capacity(mut self, n: usize) -> DynamicGraph {
        self.capacity = n.max(1);
        self
    }

    /// Input names with their declared types (symbols where the model leaves dims dynamic).
    pub fn inputs(&self) -> &[(String, TensorType)] {
        &self.inputs
    }

    /// The symbol sizes these inputs bind, after checking them against the declared types.
    ///
    /// # Errors
    /// A missing or unknown input, a dtype or rank that differs, a dim that contradicts a
    /// static dim of the model (naming input, dim, expected and given sizes), or a symbol
    /// given two sizes (naming both inputs' sizes).
    pub fn bind(&self, inputs: &HashMap<String, Tensor>) -> Result<Bindings, RuntimeError> {
        bind_inputs(&self.inputs, inputs)
    }

    /// Runs the model, compiling it first for a signature not in the cache.
    ///
    /// # Errors
    /// As [`DynamicGraph::bind`], [`DynamicGraph::compiled`] and [`CompiledGraph::run`].
    pub fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError> {
        let bindings = self.bind(inputs)?;
        self.compiled(&bindings)?.run(inputs)
    }

    /// Runs with a [`Binding`] (device buffers in and out; see
    /// [`CompiledGraph::run_with`]), compiling first for a signature not in the cache.
    ///
    /// # Errors
    /// As [`DynamicGraph::bind`], [`DynamicGraph::compiled`] and [`CompiledGraph::run_with`].
    pub fn run_with(&self, binding: &mut Binding) -> Result<(), RuntimeError> {
        let bindings = bind_values(&self.inputs, binding.inputs())?;
        self.compiled(&bindings)?.run_with(binding)
    }

    /// The session the model runs in (its device's buffers: allocate, upload, download).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The graph compiled for these symbol sizes: from the cache, or built and compiled now
    /// (evicting the least recently used signature when the cache is full).
    ///
    /// # Errors
    /// The specialiser fails for these sizes (its error, with the sizes), or compiling does.
    pub fn compiled(&self, bindings: &Bindings) -> Result<Arc<CompiledGraph>, RuntimeError> {
        {
            let mut cache = self.lock();
            cache.tick += 1;
            let tick = cache.tick;
            if let Some(entry) = cache.entries.get_mut(bindings) {
                entry.0 = tick;
                return Ok(entry.1.clone());
            }
        }
        let start = Instant::now();
        let spec = (self.build)(bindings).map_err(|source| RuntimeError::Specialise {
            bindings: signature(bindings),
            source,
        })?;
        let store = self.session.params();
        for (name, t) in spec.params {
            if !store.get(&name).is_some_and(|old| Arc::ptr_eq(&old, &t)) {
                store.set(&name, t);
            }
        }
        let compiled = Arc::new(self.session.compile(&spec.graph, self.options.clone())?);
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let mut cache = self.lock();
        cache.compiles += 1;
        cache.last_compile_ms = Some(ms);
        let tick = cache.tick;
        cache
            .entries
            .insert(bindings.clone(), (tick, compiled.clone()));
        while cache.entries.len() > self.capacity {
            let oldest = cache
                .entries
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => cache.entries.remove(&k),
                None => break,
            };
        }
        Ok(compiled)
    }

    /// The signatures compiled now, least recently used first.
    pub fn cached(&self) -> Vec<Bindings> {
        let cache = self.lock();
        let mut v: Vec<(u64, Bindings)> = cache
            .entries
            .iter()
            .map(|(k, (t, _))| (*t, k.clone()))
            .collect();
        v.sort();
        v.into_iter().map(|(_, k)| k).collect()
    }

    /// How many signatures were built and compiled so far (cache misses).
    pub fn compiles(&self) -> usize {
        self.lock().compiles
    }

    /// Wall time of the last build and compile of a new signature, in milliseconds.
    pub fn last_compile_ms(&self) -> Option<f64> {
        self.lock().last_compile_ms
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `batch=2, sequence=7` (or `no symbols`), for messages.
pub fn signature(bindings: &Bindings) -> String {
    if bindings.is_empty() {
        return "no symbols".into();
    }
    let parts: Vec<String> = bindings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(", ")
}
