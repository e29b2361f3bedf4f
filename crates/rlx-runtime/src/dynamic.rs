//! `DynamicGraph`: a model whose input dims are bound from the inputs of every run. The
//! graph is rebuilt and compiled once per distinct set of symbol sizes (a shape signature)
//! and kept in a bounded least-recently-used cache.
//!
//! The runtime knows nothing of where the graph comes from: a [`Specialiser`] builds the
//! graph and its weights for one set of sizes (the ONNX importer with dims bound, for
//! example), so ops that need static shapes work whatever the sizes.
//!
//! A model whose later shapes depend on values it computes (ONNX `NonZero`,
//! `NonMaxSuppression`, ...) runs in stages: the specialiser builds the graph up to such an
//! op and a [`HostStep`] that computes the op's results on the host from the stage's outputs;
//! the next stage is specialised for the shapes of every value carried so far, and so on
//! until a stage computes the model's outputs. Every stage is compiled once per signature
//! (input sizes plus carried types) in the same cache.

use crate::session::{bind_inputs, bind_values, Bindings};
use crate::{Binding, CompileOptions, CompiledGraph, RuntimeError, Session};
use rlx_ir::{DType, Graph, Shape, Tensor, TensorType};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// How many shape signatures a [`DynamicGraph`] keeps compiled unless told otherwise.
pub const DEFAULT_CACHE_SIZE: usize = 8;

/// An error a [`Specialiser`] or a [`HostStep`] returns.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a specialiser builds for one shape signature: a graph whose inputs have only static
/// dims, the weights it binds, and the host work that follows it when the model goes on.
pub struct Specialised {
    /// the graph
    pub graph: Graph,
    /// weights by param name (shared: the same `Arc` each time is set once)
    pub params: Vec<(String, Arc<Tensor>)>,
    /// `None` when the graph computes the model's outputs; otherwise what runs on the host
    /// after it, before the next stage (whose shapes depend on what this step computes)
    pub then: Option<HostStep>,
}

/// Host work between two stages of a run: given the run's inputs and the values carried so
/// far (the stage's outputs among them), adds the values it computes to the carried ones.
pub type HostStep = Arc<
    dyn Fn(&HashMap<String, Tensor>, &mut HashMap<String, Tensor>) -> Result<(), BoxError>
        + Send
        + Sync,
>;

/// Builds the graph of one stage for a set of symbol sizes and the (static) types of the
/// values earlier stages carried to it, sorted by name (none for the first stage).
pub type Specialiser =
    Box<dyn Fn(&Bindings, &[(String, TensorType)]) -> Result<Specialised, BoxError> + Send + Sync>;

/// A model compiled per shape signature of its inputs, runnable from several threads.
pub struct DynamicGraph {
    session: Session,
    inputs: Vec<(String, TensorType)>,
    build: Specialiser,
    options: CompileOptions,
    capacity: usize,
    cache: Mutex<Cache>,
}

/// What one stage is compiled for: the input symbol sizes and the carried values' types.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct StageKey {
    dims: Bindings,
    carried: Vec<(String, DType, Vec<usize>)>,
}

/// One compiled stage: its graph (`None` when it computes nothing) and the host work after it.
struct Stage {
    compiled: Option<Arc<CompiledGraph>>,
    then: Option<HostStep>,
}

/// Compiled stages by signature, with the tick of their last use.
#[derive(Default)]
struct Cache {
    tick: u64,
    entries: BTreeMap<StageKey, (u64, Arc<Stage>)>,
    compiles: usize,
    last_compile_ms: Option<f64>,
    total_compile_ms: f64,
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

    /// Runs the model, compiling first each stage whose signature is not in the cache.
    ///
    /// # Errors
    /// As [`DynamicGraph::bind`] and [`CompiledGraph::run`]; a stage the specialiser cannot
    /// build or the backend cannot compile; host work between stages that fails
    /// ([`RuntimeError::Host`], naming what it evaluated and why).
    pub fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError> {
        let dims = self.bind(inputs)?;
        let mut carried: HashMap<String, Tensor> = HashMap::new();
        loop {
            let stage = self.stage(&dims, &carried)?;
            let outputs = match &stage.compiled {
                Some(c) if carried.is_empty() => c.run(inputs)?,
                Some(c) => run_carried(c, inputs, &mut carried)?,
                None => Vec::new(),
            };
            let Some(then) = &stage.then else {
                return Ok(outputs);
            };
            let before = carried.len();
            carried.extend(outputs);
            then(inputs, &mut carried).map_err(|source| RuntimeError::Host {
                bindings: signature(&dims),
                source,
            })?;
            if carried.len() == before {
                return Err(RuntimeError::Host {
                    bindings: signature(&dims),
                    source: "a stage and its host step computed no new value".into(),
                });
            }
        }
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
    /// The specialiser fails for these sizes (its error, with the sizes), or compiling does;
    /// a model that runs in stages (data-dependent shapes) has no single graph: use
    /// [`DynamicGraph::run`].
    pub fn compiled(&self, bindings: &Bindings) -> Result<Arc<CompiledGraph>, RuntimeError> {
        let stage = self.stage(bindings, &HashMap::new())?;
        match (&stage.compiled, &stage.then) {
            (Some(c), None) => Ok(c.clone()),
            _ => Err(RuntimeError::Specialise {
                bindings: signature(bindings),
                source: "the model's shapes depend on values it computes, so it runs in stages \
                         (DynamicGraph::run), not as one compiled graph"
                    .into(),
            }),
        }
    }

    /// The stage for these sizes and carried values: from the cache, or built and compiled now.
    fn stage(
        &self,
        dims: &Bindings,
        carried: &HashMap<String, Tensor>,
    ) -> Result<Arc<Stage>, RuntimeError> {
        let mut types: Vec<(String, DType, Vec<usize>)> = carried
            .iter()
            .map(|(n, t)| (n.clone(), t.dtype(), t.shape().to_vec()))
            .collect();
        types.sort();
        let key = StageKey {
            dims: dims.clone(),
            carried: types,
        };
        {
            let mut cache = self.lock();
            cache.tick += 1;
            let tick = cache.tick;
            if let Some(entry) = cache.entries.get_mut(&key) {
                entry.0 = tick;
                return Ok(entry.1.clone());
            }
        }
        let start = Instant::now();
        let carried_types: Vec<(String, TensorType)> = key
            .carried
            .iter()
            .map(|(n, d, s)| (n.clone(), TensorType::new(*d, Shape::of(s))))
            .collect();
        let spec =
            (self.build)(dims, &carried_types).map_err(|source| RuntimeError::Specialise {
                bindings: signature(dims),
                source,
            })?;
        let store = self.session.params();
        for (name, t) in spec.params {
            if !store.get(&name).is_some_and(|old| Arc::ptr_eq(&old, &t)) {
                store.set(&name, t);
            }
        }
        // A stage whose values all come from earlier ones (a host op reading another's
        // result) computes nothing on the device.
        let compiled = if spec.graph.outputs().is_empty() && spec.then.is_some() {
            None
        } else {
            Some(Arc::new(
                self.session.compile(&spec.graph, self.options.clone())?,
            ))
        };
        let stage = Arc::new(Stage {
            compiled,
            then: spec.then,
        });
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let mut cache = self.lock();
        cache.compiles += 1;
        cache.last_compile_ms = Some(ms);
        cache.total_compile_ms += ms;
        let tick = cache.tick;
        cache.entries.insert(key, (tick, stage.clone()));
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
        Ok(stage)
    }

    /// The signatures compiled now, least recently used first (one per compiled stage: a
    /// model with data-dependent shapes lists its input sizes once per stage and shape of
    /// the values carried between stages).
    pub fn cached(&self) -> Vec<Bindings> {
        let cache = self.lock();
        let mut v: Vec<(u64, Bindings)> = cache
            .entries
            .iter()
            .map(|(k, (t, _))| (*t, k.dims.clone()))
            .collect();
        v.sort();
        v.into_iter().map(|(_, k)| k).collect()
    }

    /// How many signatures (stages) were built and compiled so far (cache misses).
    pub fn compiles(&self) -> usize {
        self.lock().compiles
    }

    /// Wall time of the last build and compile of a new signature, in milliseconds.
    pub fn last_compile_ms(&self) -> Option<f64> {
        self.lock().last_compile_ms
    }

    /// Wall time of every build and compile so far, in milliseconds.
    pub fn total_compile_ms(&self) -> f64 {
        self.lock().total_compile_ms
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

/// Runs a later stage: the carried values it reads are moved in and back out (no copy),
/// the run's inputs it reads are copied.
fn run_carried(
    compiled: &CompiledGraph,
    inputs: &HashMap<String, Tensor>,
    carried: &mut HashMap<String, Tensor>,
) -> Result<Vec<(String, Tensor)>, RuntimeError> {
    let mut feed: HashMap<String, Tensor> = HashMap::new();
    let mut moved: Vec<String> = Vec::new();
    for (name, ty) in compiled.inputs() {
        if let Some(t) = carried.remove(&name) {
            moved.push(name.clone());
            feed.insert(name, t);
        } else if let Some(t) = inputs.get(&name) {
            feed.insert(name, t.clone());
        } else {
            return Err(RuntimeError::Input {
                name,
                message: format!("missing (expected {ty}; a later stage reads it)"),
            });
        }
    }
    let result = compiled.run(&feed);
    for name in moved {
        if let Some(t) = feed.remove(&name) {
            carried.insert(name, t);
        }
    }
    result
}
