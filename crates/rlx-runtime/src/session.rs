//! `Session` compiles graphs for one device; `CompiledGraph` runs them.
//!
//! The pipeline reads top to bottom in [`Session::compile`] and [`CompiledGraph::variant`]:
//! verify → bind known symbols → rewrites the options ask for (tanh GELU, mixed precision) →
//! optimize (named passes; [`Session::graph_after`] stops after one) → legalize for the
//! device (dispatch report) → backend compile (lowering, fusion, memory plan, codegen).
//! Graphs with symbols still unbound compile once per distinct binding seen at run time (the
//! most recently used few kept).

use crate::registry::available_backend;
use crate::{
    Backend, Binding, BoundValue, CompileOptions, DeviceBuffer, Executable, ParamStore, RawHandle,
    RuntimeError,
};
use rlx_driver::Device;
use rlx_ir::{DType, Dim, Graph, Op, Tensor, TensorType};
use rlx_opt::DispatchReport;
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A device plus the weights shared by every graph compiled on it. A clone is the same
/// session: it shares the backend and the weights.
///
/// The backend is looked up in the registry again at every [`Session::compile`] when a
/// backend was registered since (`crate::register_backend`), so a replacement registered
/// after the session exists is the one new graphs compile with; graphs compiled earlier keep
/// theirs.
#[derive(Clone)]
pub struct Session {
    device: Device,
    /// (registry generation it was made at, the backend)
    backend: Arc<Mutex<(u64, Arc<dyn Backend>)>>,
    params: ParamStore,
}

impl Session {
    /// A session on `device`, checked against the registry.
    ///
    /// # Errors
    /// No backend is registered for the device (names the Cargo feature), or the device is
    /// not available (names the reason).
    pub fn new(device: Device) -> Result<Session, RuntimeError> {
        let generation = crate::registry::generation();
        let backend = available_backend(device)?;
        Ok(Session {
            device,
            backend: Arc::new(Mutex::new((generation, Arc::from(backend)))),
            params: ParamStore::new(),
        })
    }

    /// The backend to compile with: the registry's current one for the device (looked up
    /// again if anything was registered since the last look).
    fn compile_backend(&self) -> Result<Arc<dyn Backend>, RuntimeError> {
        let generation = crate::registry::generation();
        let mut held = self.backend.lock().unwrap_or_else(|e| e.into_inner());
        if held.0 != generation {
            *held = (generation, Arc::from(available_backend(self.device)?));
        }
        Ok(held.1.clone())
    }

    /// The session's device.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The weights shared by this session's graphs.
    pub fn params(&self) -> &ParamStore {
        &self.params
    }

    /// Sets a weight for every graph of this session.
    pub fn set_param(&self, name: &str, value: Tensor) {
        self.params.set(name, Arc::new(value));
    }

    /// The device's backend (buffers, statistics).
    pub fn backend(&self) -> Arc<dyn Backend> {
        self.backend
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// Allocates a device buffer from the device's pool (see [`Backend::alloc`]).
    ///
    /// # Errors
    /// As [`Backend::alloc`].
    pub fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<DeviceBuffer, RuntimeError> {
        self.backend().alloc(dtype, shape)
    }

    /// A device buffer holding a copy of `t`.
    ///
    /// # Errors
    /// As [`Backend::alloc`] and [`Backend::upload`].
    pub fn to_device(&self, t: &Tensor) -> Result<DeviceBuffer, RuntimeError> {
        let backend = self.backend();
        let b = backend.alloc(t.dtype(), t.shape())?;
        backend.upload(&b, t)?;
        Ok(b)
    }

    /// Copies `t` into `dst` (see [`Backend::upload`]).
    ///
    /// # Errors
    /// As [`Backend::upload`].
    pub fn upload(&self, dst: &DeviceBuffer, t: &Tensor) -> Result<(), RuntimeError> {
        self.backend().upload(dst, t)
    }

    /// The buffer's contents on the host (see [`Backend::download`]).
    ///
    /// # Errors
    /// As [`Backend::download`].
    pub fn download(&self, src: &DeviceBuffer) -> Result<Tensor, RuntimeError> {
        self.backend().download(src)
    }

    /// Copies `src` into `dst` on the device (see [`Backend::copy`]).
    ///
    /// # Errors
    /// As [`Backend::copy`].
    pub fn copy(&self, src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<(), RuntimeError> {
        self.backend().copy(src, dst)
    }

    /// Sets every element of `dst` to `value` (see [`Backend::fill`]).
    ///
    /// # Errors
    /// As [`Backend::fill`].
    pub fn fill(&self, dst: &DeviceBuffer, value: f64) -> Result<(), RuntimeError> {
        self.backend().fill(dst, value)
    }

    /// A buffer over foreign memory (see [`Backend::wrap`]).
    ///
    /// # Safety
    /// As [`Backend::wrap`].
    ///
    /// # Errors
    /// As [`Backend::wrap`].
    pub unsafe fn wrap(
        &self,
        handle: RawHandle,
        dtype: DType,
        shape: &[usize],
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<DeviceBuffer, RuntimeError> {
        // SAFETY: the caller's contract is the backend's.
        unsafe { self.backend().wrap(handle, dtype, shape, owner) }
    }

    /// Compiles a graph. Symbols bound in `options.bindings` are fixed now; the rest are
    /// bound from input shapes at run time.
    ///
    /// # Errors
    /// A malformed graph, a failing pass, unsupported nodes (all listed), or a backend
    /// failure.
    pub fn compile(
        &self,
        graph: &Graph,
        options: CompileOptions,
    ) -> Result<CompiledGraph, RuntimeError> {
        graph.verify()?;
        let graph = if options.bindings.is_empty() {
            graph.clone()
        } else {
            graph.bind(&options.bindings)?
        };
        let backend = self.compile_backend()?;
        let low_params = match options.precision {
            Some(low) => {
                let (_, report) = mixed_precision(backend.as_ref(), &graph, low)?;
                report.params.into_iter().map(|p| (p, low)).collect()
            }
            None => HashMap::new(),
        };
        let compiled = CompiledGraph {
            device: self.device,
            backend,
            params: self.params.clone(),
            graph,
            options,
            variants: Mutex::new(Variants::default()),
            low_params,
            converted: Mutex::new(HashMap::new()),
        };
        if compiled.graph.symbols().is_empty() {
            compiled.variant(&BTreeMap::new())?;
        }
        Ok(compiled)
    }

    /// The graph as [`Session::compile`]'s pipeline leaves it right after the pass named
    /// `pass` (one of [`rlx_opt::PASSES`]): verified, bound with `options.bindings`,
    /// rewritten as `options` asks, and optimized up to that pass; nothing after it runs
    /// (no legalization, no backend compile). What `rlx dump --after` prints.
    ///
    /// # Errors
    /// An unknown pass name (listing the known ones), a malformed graph or a failing pass.
    pub fn graph_after(
        &self,
        graph: &Graph,
        options: &CompileOptions,
        pass: &str,
    ) -> Result<Graph, RuntimeError> {
        graph.verify()?;
        let graph = if options.bindings.is_empty() {
            graph.clone()
        } else {
            graph.bind(&options.bindings)?
        };
        let backend = self.compile_backend()?;
        let graph = rewrite(&*backend, options, graph)?;
        let fold = |op: &Op, ins: &[&Tensor]| backend.const_eval(op, ins);
        Ok(rlx_opt::optimize_until(&graph, &fold, pass)?)
    }
}

/// Where every node of `graph` would run on `device` and how (native, decomposed,
/// unsupported), as [`Session::compile`] decides it — verified, bound with
/// `options.bindings` (unbound symbols are an error), rewritten and optimized — without
/// compiling anything, so it also answers for a device that is registered but not available
/// here (a seam reports its nodes unsupported, with the reason).
///
/// # Errors
/// No backend registered for `device`, a malformed graph or a failing pass.
pub fn dispatch_report(
    device: Device,
    graph: &Graph,
    options: &CompileOptions,
) -> Result<DispatchReport, RuntimeError> {
    let (backend, optimized) = optimized_on(device, graph, options)?;
    let caps = |op: &Op, ins: &[&TensorType]| backend.supports(op, ins);
    match rlx_opt::legalize(&optimized, device.name(), &caps) {
        Ok((_, report)) => Ok(report),
        Err(rlx_opt::LegalizeError::Unsupported { report, .. }) => Ok(*report),
        Err(e) => Err(e.into()),
    }
}

/// `device`'s registered backend and `graph` as the compile pipeline leaves it before
/// legalization: verified, bound with `options.bindings`, rewritten and optimized (constants
/// folded by the backend). Nothing is compiled, so the device need not be available.
pub(crate) fn optimized_on(
    device: Device,
    graph: &Graph,
    options: &CompileOptions,
) -> Result<(Box<dyn Backend>, Graph), RuntimeError> {
    let backend =
        crate::registry::backend_for(device).ok_or(rlx_driver::DeviceError::NotRegistered {
            device,
            feature: device.cargo_feature(),
        })?;
    graph.verify()?;
    let graph = if options.bindings.is_empty() {
        graph.clone()
    } else {
        graph.bind(&options.bindings)?
    };
    let graph = rewrite(&*backend, options, graph)?;
    let fold = |op: &Op, ins: &[&Tensor]| backend.const_eval(op, ins);
    let optimized = rlx_opt::optimize(&graph, &fold)?;
    Ok((backend, optimized))
}

/// The product of compiling one graph for every binding needed so far.
pub struct Variant {
    /// the backend program
    pub executable: Box<dyn Executable>,
    /// where each node runs
    pub report: DispatchReport,
    /// the graph after passes and legalization
    pub graph: Graph,
    /// wall time of the compile, in milliseconds
    pub compile_ms: f64,
}

/// Sizes of symbolic dims, by symbol.
pub type Bindings = BTreeMap<String, usize>;

/// A graph compiled for a device, runnable from several threads at once.
pub struct CompiledGraph {
    device: Device,
    backend: Arc<dyn Backend>,
    params: ParamStore,
    graph: Graph,
    options: CompileOptions,
    /// compiled bindings, the least recently used dropped past `DEFAULT_CACHE_SIZE`
    variants: Mutex<Variants>,
    /// params mixed precision reads in a low dtype, bound as f32 and converted
    low_params: HashMap<String, rlx_ir::DType>,
    /// per param: the f32 value last converted, and its conversion
    converted: Mutex<HashMap<String, Conversion>>,
}

/// The variants compiled so far, each with the tick of its last use.
#[derive(Default)]
struct Variants {
    tick: u64,
    map: BTreeMap<Bindings, (u64, Arc<Variant>)>,
}

/// A weight as bound (f32) and its low-precision copy.
type Conversion = (Arc<Tensor>, Arc<Tensor>);

impl CompiledGraph {
    /// The device it runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Input names with their declared types.
    pub fn inputs(&self) -> Vec<(String, TensorType)> {
        self.graph
            .inputs()
            .into_iter()
            .map(|(n, id)| (n, self.graph.ty(id).clone()))
            .collect()
    }

    /// Param names with their declared types.
    pub fn param_types(&self) -> Vec<(String, TensorType)> {
        self.graph
            .params()
            .into_iter()
            .map(|(n, id)| (n, self.graph.ty(id).clone()))
            .collect()
    }

    /// Sets a weight (shared with every graph of the session), checking its type.
    ///
    /// # Errors
    /// The graph has no such param, or the dtype or shape differ from its declaration.
    pub fn set_param(&self, name: &str, value: Tensor) -> Result<(), RuntimeError> {
        let Some((_, ty)) = self.param_types().into_iter().find(|(n, _)| n == name) else {
            let known: Vec<String> = self.param_types().into_iter().map(|(n, _)| n).collect();
            return Err(RuntimeError::Param {
                name: name.into(),
                message: format!("the graph has no such param; params: {}", known.join(", ")),
            });
        };
        check_type(&ty, value.dtype(), value.shape(), name, &mut Bound::new()).map_err(
            |message| RuntimeError::Param {
                name: name.into(),
                message,
            },
        )?;
        self.params.set(name, Arc::new(value));
        Ok(())
    }

    /// The compiled variant for static graphs (or the first one compiled).
    pub fn first_variant(&self) -> Option<Arc<Variant>> {
        self.variants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map
            .values()
            .next()
            .map(|(_, v)| v.clone())
    }

    /// Runs the graph.
    ///
    /// # Errors
    /// Missing, unknown or mistyped inputs (naming expected and given types), missing
    /// params, or a backend failure.
    pub fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError> {
        let bindings = self.check_inputs(inputs)?;
        let variant = self.variant(&bindings)?;
        self.check_params()?;
        if self.options.validate {
            self.validate(inputs)?.into_result()?;
        }
        if self.low_params.is_empty() {
            return variant.executable.run(inputs, &self.params);
        }
        variant.executable.run(inputs, &self.mixed_params())
    }

    /// Runs with the inputs and outputs of `binding` (host tensors or device buffers in,
    /// device buffers out: see [`Binding`]). Outputs the binding does not name are not
    /// returned; when it names none, every output comes back in a device buffer. On CUDA and
    /// wgpu nothing passes through host memory except host-tensor inputs.
    ///
    /// # Errors
    /// As [`CompiledGraph::run`]; an input or output buffer on another device, or an output
    /// buffer whose dtype or shape differs from the output's (naming both).
    pub fn run_with(&self, binding: &mut Binding) -> Result<(), RuntimeError> {
        let bindings = bind_values(&self.inputs(), binding.inputs())?;
        for (name, v) in binding.inputs() {
            if let BoundValue::Device(b) = v {
                if b.device() != self.device {
                    return Err(RuntimeError::Input {
                        name: name.clone(),
                        message: format!(
                            "a {} buffer, but the graph runs on {}",
                            b.device(),
                            self.device
                        ),
                    });
                }
            }
        }
        let variant = self.variant(&bindings)?;
        self.check_params()?;
        let declared: Vec<(String, TensorType)> = variant
            .graph
            .outputs()
            .iter()
            .map(|(n, id)| (n.clone(), variant.graph.ty(*id).clone()))
            .collect();
        let mut wanted = binding.output_names();
        if wanted.is_empty() {
            for (name, _) in &declared {
                binding.bind_output_to_device(name);
            }
            wanted = binding.output_names();
        }
        let mut outputs = Vec::with_capacity(wanted.len());
        for name in &wanted {
            let Some((_, ty)) = declared.iter().find(|(n, _)| n == name) else {
                let names: Vec<&str> = declared.iter().map(|(n, _)| n.as_str()).collect();
                return Err(RuntimeError::Output {
                    name: name.clone(),
                    message: format!(
                        "the graph has no such output; outputs: {}",
                        names.join(", ")
                    ),
                });
            };
            let shape = ty.shape.as_static().unwrap_or_default();
            let buffer = match binding.allocates(name) {
                // a buffer the last run allocated, reused when nobody else holds it
                Some(Some(b))
                    if b.is_unique() && b.dtype() == ty.dtype && b.shape() == shape.as_slice() =>
                {
                    b.clone()
                }
                Some(_) => self.backend.alloc(ty.dtype, &shape)?,
                None => {
                    let b = binding
                        .output(name)
                        .cloned()
                        .ok_or_else(|| RuntimeError::Output {
                            name: name.clone(),
                            message: "not bound".into(),
                        })?;
                    if b.device() != self.device {
                        return Err(RuntimeError::Output {
                            name: name.clone(),
                            message: format!(
                                "a {} buffer, but the graph runs on {}",
                                b.device(),
                                self.device
                            ),
                        });
                    }
                    if b.dtype() != ty.dtype || b.shape() != shape.as_slice() {
                        return Err(RuntimeError::Output {
                            name: name.clone(),
                            message: format!(
                                "the output is {ty}, the bound buffer {}{:?}",
                                b.dtype(),
                                b.shape()
                            ),
                        });
                    }
                    b
                }
            };
            outputs.push((name.clone(), buffer));
        }
        let inputs: HashMap<String, BoundValue> = binding
            .inputs()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let params = self.bound_params();
        variant.executable.run_bound(&inputs, &outputs, &params)?;
        for (name, buffer) in outputs {
            if binding.allocates(&name).is_some() {
                binding.set_allocated(&name, buffer);
            }
        }
        Ok(())
    }

    /// The session's backend (for buffers: allocate, upload, download).
    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// Runs `runs` times timing every kernel on the device's clock (see
    /// [`crate::Executable::profile`]); `None` when the device cannot time its kernels.
    ///
    /// # Errors
    /// As [`CompiledGraph::run`].
    pub fn profile(
        &self,
        inputs: &HashMap<String, Tensor>,
        runs: usize,
    ) -> Result<Option<crate::RunProfile>, RuntimeError> {
        let bindings = self.check_inputs(inputs)?;
        let variant = self.variant(&bindings)?;
        self.check_params()?;
        variant
            .executable
            .profile(inputs, &self.bound_params(), runs.max(1))
    }

    /// Checks every node of the compiled graph for these inputs against the CPU interpreter
    /// (the validation layer; see [`crate::Validation`]): the report lists each node's error
    /// and [`crate::Validation::first_divergence`] names the first node outside tolerance.
    ///
    /// # Errors
    /// As [`CompiledGraph::run`], or the probe graph (every value an output) fails to compile
    /// or run on the device.
    pub fn validate(
        &self,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<crate::Validation, RuntimeError> {
        let bindings = self.check_inputs(inputs)?;
        let variant = self.variant(&bindings)?;
        self.check_params()?;
        crate::validate::validate(
            &*self.backend,
            self.device,
            &self.options,
            &variant.graph,
            inputs,
            &self.bound_params(),
        )
    }

    /// The device allocator's statistics (see [`crate::Executable::memory`]); `None` before
    /// anything was compiled or where the device has no pooled allocator.
    pub fn memory(&self) -> Option<rlx_mem::Stats> {
        self.first_variant().and_then(|v| v.executable.memory())
    }

    /// The weights as the compiled program reads them: the session's, with those that
    /// mixed precision reads in a low dtype converted (a tool that runs the variant's graph
    /// itself, such as a profiler, binds these).
    pub fn bound_params(&self) -> ParamStore {
        if self.low_params.is_empty() {
            return self.params.clone();
        }
        self.mixed_params()
    }

    /// The session's weights with those that mixed precision reads in a low dtype
    /// converted; each conversion is kept until the weight is replaced.
    fn mixed_params(&self) -> ParamStore {
        let mut map = (*self.params.snapshot()).clone();
        let mut cache = self.converted.lock().unwrap_or_else(|e| e.into_inner());
        for (name, &low) in &self.low_params {
            let Some(src) = map.get(name).cloned() else {
                continue;
            };
            let hit = cache
                .get(name)
                .filter(|(from, _)| Arc::ptr_eq(from, &src))
                .map(|(_, to)| to.clone());
            let low_value = hit.unwrap_or_else(|| {
                let to = Arc::new(src.cast(low));
                cache.insert(name.clone(), (src, to.clone()));
                to
            });
            map.insert(name.clone(), low_value);
        }
        ParamStore::from_map(map)
    }

    fn check_params(&self) -> Result<(), RuntimeError> {
        let snapshot = self.params.snapshot();
        for (name, ty) in self.param_types() {
            let Some(t) = snapshot.get(&name) else {
                return Err(RuntimeError::Param {
                    name,
                    message: format!("not set (expected {ty}); load weights or call set_param"),
                });
            };
            check_type(&ty, t.dtype(), t.shape(), &name, &mut Bound::new()).map_err(|message| {
                RuntimeError::Param {
                    name: name.clone(),
                    message,
                }
            })?;
        }
        Ok(())
    }

    fn check_inputs(&self, inputs: &HashMap<String, Tensor>) -> Result<Bindings, RuntimeError> {
        bind_inputs(&self.inputs(), inputs)
    }

    /// Compiles (once) and returns the variant for these symbol bindings; the
    /// [`crate::DEFAULT_CACHE_SIZE`] most recently used bindings stay compiled.
    ///
    /// # Errors
    /// Any compile failure for those shapes.
    pub fn variant(&self, bindings: &Bindings) -> Result<Arc<Variant>, RuntimeError> {
        {
            let mut variants = self.variants.lock().unwrap_or_else(|e| e.into_inner());
            variants.tick += 1;
            let tick = variants.tick;
            if let Some(entry) = variants.map.get_mut(bindings) {
                entry.0 = tick;
                return Ok(entry.1.clone());
            }
        }
        let start = Instant::now();
        let map: HashMap<String, usize> = bindings.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let bound = if map.is_empty() {
            self.graph.clone()
        } else {
            self.graph.bind(&map)?
        };
        let bound = rewrite(&*self.backend, &self.options, bound)?;
        let backend = self.backend.clone();
        let fold = |op: &Op, ins: &[&Tensor]| backend.const_eval(op, ins);
        let optimized = rlx_opt::optimize(&bound, &fold)?;
        let caps = |op: &Op, ins: &[&TensorType]| self.backend.supports(op, ins);
        let (legal, report) = rlx_opt::legalize(&optimized, self.device.name(), &caps)?;
        if self.options.print_report || crate::settings::DISPATCH_REPORT.switch() {
            eprintln!("{report}");
        }
        let executable = self.backend.compile(&legal, &self.options)?;
        let variant = Arc::new(Variant {
            executable,
            report,
            graph: legal,
            compile_ms: start.elapsed().as_secs_f64() * 1e3,
        });
        let mut variants = self.variants.lock().unwrap_or_else(|e| e.into_inner());
        let tick = variants.tick;
        variants
            .map
            .insert(bindings.clone(), (tick, variant.clone()));
        if variants.map.len() > crate::DEFAULT_CACHE_SIZE {
            let oldest = variants
                .map
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                variants.map.remove(&k);
            }
        }
        Ok(variant)
    }
}

/// The rewrites `options` ask for before the optimization passes: exact GELU as its tanh
/// form, then mixed precision (as the backend takes it).
pub(crate) fn rewrite(
    backend: &dyn Backend,
    options: &CompileOptions,
    graph: Graph,
) -> Result<Graph, RuntimeError> {
    let graph = if options.approximate_gelu {
        rlx_opt::approximate_gelu(&graph)?.0
    } else {
        graph
    };
    Ok(match options.precision {
        Some(low) => mixed_precision(backend, &graph, low)?.0,
        None => graph,
    })
}

/// Mixed precision as the backend takes it: its products in `low`, and its activations too
/// where it stores them low ([`Backend::low_precision_activations`]).
fn mixed_precision(
    backend: &dyn Backend,
    graph: &Graph,
    low: DType,
) -> Result<(Graph, rlx_opt::AutocastReport), RuntimeError> {
    let product = |op: &Op, weight: bool| backend.low_precision_product(op, weight);
    Ok(if backend.low_precision_activations() {
        let runs = |op: &Op, inputs: &[&TensorType]| backend.supports(op, inputs);
        rlx_opt::autocast_all(graph, low, &product, &runs)?
    } else {
        rlx_opt::autocast_where(graph, low, &product)?
    })
}

/// Symbol sizes bound so far, each with the input that bound it.
pub(crate) type Bound = BTreeMap<String, (usize, String)>;

/// Checks `t`, given for `input`, against a declared type, binding symbols consistently:
/// a static dim that differs names the dim, expected and given sizes; a symbol bound to
/// another size names the input that bound it and both sizes.
pub(crate) fn check_type(
    ty: &TensorType,
    dtype: DType,
    shape: &[usize],
    input: &str,
    bound: &mut Bound,
) -> Result<(), String> {
    let given = format!("{dtype}{shape:?}");
    if dtype != ty.dtype {
        return Err(format!("expected {ty}, got {given}: dtype differs"));
    }
    if shape.len() != ty.shape.rank() {
        return Err(format!("expected {ty}, got {given}: rank differs"));
    }
    for (i, (d, &n)) in ty.shape.dims().iter().zip(shape).enumerate() {
        match d {
            Dim::Static(s) if *s != n => {
                return Err(format!(
                    "dim {i} is {n}, expected {s} (declared {ty}, given {given})"
                ))
            }
            Dim::Sym(s) => match bound.get(&**s) {
                Some((b, from)) if *b != n => {
                    let from = if from == input {
                        "an earlier dim of this input".to_string()
                    } else {
                        format!("input `{from}`")
                    };
                    return Err(format!(
                        "dim {i} (`{s}`) is {n}, but {from} gives `{s}` = {b} (declared {ty}, given {given})"
                    ));
                }
                Some(_) => {}
                None => {
                    bound.insert(s.to_string(), (n, input.to_string()));
                }
            },
            _ => {}
        }
    }
    Ok(())
}

/// Checks run inputs against declared ones (all present, none unknown, types agreeing) and
/// returns the symbol sizes they bind.
///
/// # Errors
/// A missing or unknown input, a dtype or rank that differs, a dim that contradicts a static
/// dim (naming input, dim, expected and given sizes), or a symbol given two sizes (naming
/// the input, the dim and both sizes).
pub fn bind_inputs(
    declared: &[(String, TensorType)],
    inputs: &HashMap<String, Tensor>,
) -> Result<Bindings, RuntimeError> {
    let given = |name: &str| inputs.get(name).map(|t| (t.dtype(), t.shape()));
    bind_typed(declared, &given, inputs.keys())
}

/// As [`bind_inputs`] for bound values (host tensors or device buffers).
///
/// # Errors
/// As [`bind_inputs`].
pub fn bind_values(
    declared: &[(String, TensorType)],
    inputs: &BTreeMap<String, BoundValue>,
) -> Result<Bindings, RuntimeError> {
    let given = |name: &str| inputs.get(name).map(|v| (v.dtype(), v.shape()));
    bind_typed(declared, &given, inputs.keys())
}

/// The dtype and shape given for an input name, if any.
type Given<'a> = dyn Fn(&str) -> Option<(DType, &'a [usize])> + 'a;

/// Checks given (dtype, shape) per input name against the declared inputs.
fn bind_typed<'a>(
    declared: &[(String, TensorType)],
    given: &Given<'a>,
    names: impl Iterator<Item = &'a String>,
) -> Result<Bindings, RuntimeError> {
    let mut bound = Bound::new();
    for (name, ty) in declared {
        let Some((dtype, shape)) = given(name) else {
            return Err(RuntimeError::Input {
                name: name.clone(),
                message: format!("missing (expected {ty})"),
            });
        };
        check_type(ty, dtype, shape, name, &mut bound).map_err(|message| RuntimeError::Input {
            name: name.clone(),
            message,
        })?;
    }
    let mut unknown: Vec<&String> = names
        .filter(|k| !declared.iter().any(|(n, _)| n == *k))
        .collect();
    if !unknown.is_empty() {
        unknown.sort();
        let names: Vec<&str> = declared.iter().map(|(n, _)| n.as_str()).collect();
        return Err(RuntimeError::Input {
            name: unknown[0].clone(),
            message: format!("the graph has no such input; inputs: {}", names.join(", ")),
        });
    }
    Ok(bound.into_iter().map(|(k, (n, _))| (k, n)).collect())
}
