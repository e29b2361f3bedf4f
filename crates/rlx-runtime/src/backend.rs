//! The contract every device backend implements. Kept small on purpose: a backend answers
//! availability, says which ops it runs natively, and compiles a legalized graph.

use crate::{BoundValue, DeviceBuffer, ParamStore, RawHandle, RuntimeError};
use rlx_driver::{Availability, Device, DeviceInfo};
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{DType, Graph, Op, Tensor, TensorType};
use std::any::Any;
use std::collections::HashMap;

/// Options that change what a backend compiles (and so are part of any cache key).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// Sizes for symbolic dims known at compile time; others are bound at run time.
    pub bindings: HashMap<String, usize>,
    /// Fail instead of running any node somewhere else than the chosen device. RLX has no
    /// fallback today, so this only documents intent; reports always show placement.
    pub strict: bool,
    /// Print the dispatch report to stderr at compile (also `RLX_DISPATCH_REPORT=1`).
    pub print_report: bool,
    /// Worker threads for CPU execution (None: all cores).
    pub threads: Option<usize>,
    /// Mixed precision: f32 matrix products (matmul, conv2d, attention; those the backend
    /// has low-precision kernels for, see [`Backend::low_precision_product`]) run in this
    /// dtype (f16 or bf16) with f32 accumulation; weights read only by them are converted
    /// once when bound. `None`: the graph's own dtypes.
    pub precision: Option<rlx_ir::DType>,
    /// Run exact GELU as its tanh approximation (opt-in; absolute error up to
    /// [`rlx_opt::GELU_TANH_MAX_ABS_ERROR`]). On CUDA the tanh form fuses into the preceding
    /// GEMM's cuBLASLt epilogue, which exact GELU cannot.
    pub approximate_gelu: bool,
    /// Quantized matmuls (every block format) dot f32 activations with the
    /// dequantized weights instead of quantizing the activations to 8 bits for integer dot
    /// products, the CPU's default on decode steps, as llama.cpp does. Keeps results within
    /// f32 rounding of the reference interpreter, for parity tests. A node can ask for this
    /// on its own (`Op::QuantMatMul::int8_activations` false: ONNX `MatMulNBits` below
    /// `accuracy_level` 4); this option applies it to every node.
    pub exact_quant: bool,
    /// Validation layer: every run also checks each node's value on the device against the
    /// CPU interpreter fed the device's operands, and fails naming the first node that
    /// diverges (see [`crate::Validation`]); slow, for debugging a device.
    pub validate: bool,
}

/// A device backend.
pub trait Backend: Send + Sync {
    /// The device this backend serves.
    fn device(&self) -> Device;

    /// Whether hardware and driver are present now, with a reason when not.
    fn availability(&self) -> Availability;

    /// Facts about the device, when available.
    fn info(&self) -> Option<DeviceInfo> {
        None
    }

    /// The knobs (environment variables) this backend reads, with their values now; what
    /// `rlx devices --settings` lists.
    fn settings(&self) -> Vec<rlx_driver::Setting> {
        Vec::new()
    }

    /// True when the backend runs `op` natively for inputs of these types. Legalization
    /// decomposes or reports whatever this rejects.
    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool;

    /// Under mixed precision ([`CompileOptions::precision`]), whether this matrix product
    /// (matmul, conv2d, attention; `weight`: its right operand is a param or a constant)
    /// runs in the low dtype; a backend whose kernel for it computes in f32 anyway keeps it
    /// in f32. Default: every product.
    fn low_precision_product(&self, _op: &Op, _weight: bool) -> bool {
        true
    }

    /// Under mixed precision, whether the tensors between products (norms, softmax,
    /// elementwise, the residual stream) are stored in the low dtype too, as PyTorch's
    /// `model.half()` runs a model, the backend computing in f32 inside each kernel
    /// (`rlx_opt::autocast_all`). Default: no, only the products are low.
    fn low_precision_activations(&self) -> bool {
        false
    }

    /// Whether the backend's compiler lowers `op` natively for inputs of these types, the
    /// device present or not ([`Backend::supports`] is this and availability); legalizes for
    /// [`Backend::kernel_decisions`] on a machine without the device. Default: `supports`.
    fn lowers(&self, op: &Op, inputs: &[&TensorType]) -> bool {
        self.supports(op, inputs)
    }

    /// What the kernel-IR passes this backend chooses decide for a lowered `program`, up to
    /// and including the pass `pass` (one of [`rlx_opt::KERNEL_PASSES`]), as
    /// [`rlx_opt::KernelDecisions::dump`] prints it (`rlx dump --after`). Default: a backend
    /// that chooses none (an unknown name is still an error).
    ///
    /// # Errors
    /// An unknown pass, or a program the backend's planner rejects.
    fn kernel_decisions(
        &self,
        program: &KernelProgram,
        pass: &str,
    ) -> Result<String, RuntimeError> {
        no_kernel_passes(program, pass)
    }

    /// Evaluates an op on host tensors with reference semantics, for constant folding.
    /// Default: the validation interpreter (`rlx-interp`), so every device folds the same
    /// constants to the same values; `None` where the interpreter rejects the operands.
    fn const_eval(&self, op: &Op, inputs: &[&Tensor]) -> Option<Tensor> {
        rlx_interp::eval_op(op, inputs).ok()
    }

    /// Compiles a verified, optimized, legalized graph whose shapes are all static.
    ///
    /// # Errors
    /// The device is unavailable, or code generation failed; the error names what is
    /// missing or which kernel failed.
    fn compile(
        &self,
        graph: &Graph,
        options: &CompileOptions,
    ) -> Result<Box<dyn Executable>, RuntimeError>;

    /// Allocates a buffer of `dtype` and `shape` from the device's pool (counted in
    /// [`Backend::memory`]); its contents are unspecified until written.
    ///
    /// # Errors
    /// The device has no buffer API (`"not supported on <device>"`), or out of memory (with
    /// the sizes).
    fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<DeviceBuffer, RuntimeError> {
        let _ = (dtype, shape);
        Err(unsupported(self.device(), "allocating device buffers"))
    }

    /// A buffer over memory someone else owns (a DLPack tensor): `handle` is its first
    /// byte; `owner` is dropped when the last view of the buffer is.
    ///
    /// # Safety
    /// `handle` addresses at least `shape.product() * dtype.size_bytes()` bytes of this
    /// device's memory, valid while `owner` lives.
    ///
    /// # Errors
    /// The device cannot read foreign memory, or the handle is of another kind of memory.
    unsafe fn wrap(
        &self,
        handle: RawHandle,
        dtype: DType,
        shape: &[usize],
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<DeviceBuffer, RuntimeError> {
        let _ = (handle, dtype, shape, owner);
        Err(unsupported(self.device(), "wrapping foreign memory"))
    }

    /// Copies a host tensor of the buffer's dtype and shape into it.
    ///
    /// # Errors
    /// Not supported, a dtype or shape that differs, or a device failure.
    fn upload(&self, dst: &DeviceBuffer, src: &Tensor) -> Result<(), RuntimeError> {
        let _ = (dst, src);
        Err(unsupported(self.device(), "uploading to device buffers"))
    }

    /// The buffer's contents as a host tensor.
    ///
    /// # Errors
    /// Not supported, or a device failure.
    fn download(&self, src: &DeviceBuffer) -> Result<Tensor, RuntimeError> {
        let _ = src;
        Err(unsupported(self.device(), "downloading device buffers"))
    }

    /// Copies `src` into `dst` on the device (same byte size).
    ///
    /// # Errors
    /// Not supported, sizes that differ, or a device failure.
    fn copy(&self, src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<(), RuntimeError> {
        let _ = (src, dst);
        Err(unsupported(self.device(), "copying device buffers"))
    }

    /// Sets every element to `value` (rounded to the buffer's dtype). Default: an upload
    /// of a filled host tensor.
    ///
    /// # Errors
    /// As [`Backend::upload`].
    fn fill(&self, dst: &DeviceBuffer, value: f64) -> Result<(), RuntimeError> {
        self.upload(dst, &Tensor::full(dst.dtype(), dst.shape(), value))
    }

    /// Calls `f` with the buffer's bytes read in place, where the device's memory is
    /// host-visible (the CPU); elsewhere use [`Backend::download`].
    ///
    /// # Errors
    /// The memory is not host-visible on this device.
    fn map_read(&self, buf: &DeviceBuffer, f: &mut dyn FnMut(&[u8])) -> Result<(), RuntimeError> {
        let _ = (buf, f);
        Err(unsupported(
            self.device(),
            "mapping device memory on the host",
        ))
    }

    /// Calls `f` with the buffer's bytes to write in place, where the device's memory is
    /// host-visible (the CPU); elsewhere use [`Backend::upload`].
    ///
    /// # Errors
    /// The memory is not host-visible on this device.
    fn map_write(
        &self,
        buf: &DeviceBuffer,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), RuntimeError> {
        let _ = (buf, f);
        Err(unsupported(
            self.device(),
            "mapping device memory on the host",
        ))
    }

    /// Statistics of the pool device buffers come from; `None` where there is none.
    fn memory(&self) -> Option<rlx_mem::Stats> {
        None
    }

    /// The stream device work is ordered on, as an integer (a `CUstream` on CUDA), for
    /// DLPack's `__dlpack__(stream=...)`; `None` where the device has no streams.
    fn interop_stream(&self) -> Option<u64> {
        None
    }
}

/// The error of a buffer operation a device lacks.
/// [`Backend::kernel_decisions`] of a backend that chooses no kernel-IR pass: nothing decided,
/// the name still checked.
pub(crate) fn no_kernel_passes(
    program: &KernelProgram,
    pass: &str,
) -> Result<String, RuntimeError> {
    let caps = rlx_opt::KernelCaps::<rlx_opt::NoGemms> {
        attention_views: None,
        sibling_gemms: None,
        gemm_norm: false,
    };
    let none: rlx_opt::KernelDecisions<(), ()> =
        rlx_opt::run_kernel_passes_until(program, &caps, pass)?;
    Ok(none.dump(program))
}

pub(crate) fn unsupported(device: Device, what: &str) -> RuntimeError {
    RuntimeError::Unsupported {
        device: device.to_string(),
        what: what.to_string(),
    }
}

/// Checks that a host tensor matches a buffer's dtype and shape (`what` names the call).
///
/// # Errors
/// Either differs; the message gives both.
pub fn check_same(what: &str, buf: &DeviceBuffer, t: &Tensor) -> Result<(), RuntimeError> {
    if buf.dtype() != t.dtype() || buf.shape() != t.shape() {
        return Err(RuntimeError::Buffer(format!(
            "{what}: the buffer is {}{:?}, the tensor {}{:?}",
            buf.dtype(),
            buf.shape(),
            t.dtype(),
            t.shape()
        )));
    }
    Ok(())
}

/// A compiled program for one device and one set of shapes.
pub trait Executable: Send + Sync {
    /// Runs with inputs by name; params come from the session's store.
    ///
    /// # Errors
    /// Missing params, or a device failure during the run.
    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &ParamStore,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError>;

    /// Number of kernels launched per run.
    fn kernel_count(&self) -> usize;

    /// Bytes of the planned intermediate arena.
    fn arena_bytes(&self) -> usize;

    /// The generated program, as text (for `rlx dump --stage kernels`).
    fn dump(&self) -> String;

    /// The device allocator's statistics (bytes in use and reserved, their peaks, provider
    /// allocations) after the runs so far; `None` where the device has no pooled allocator
    /// (the CPU's intermediates live in one arena of [`Executable::arena_bytes`]).
    fn memory(&self) -> Option<rlx_mem::Stats> {
        None
    }

    /// Runs with inputs that may be device buffers, writing each output named in `outputs`
    /// into its buffer (checked by the caller against the program's types), with no host
    /// round trip where the device has memory of its own.
    ///
    /// # Errors
    /// The backend cannot bind buffers, a buffer of another device, or a run failure.
    fn run_bound(
        &self,
        inputs: &HashMap<String, BoundValue>,
        outputs: &[(String, DeviceBuffer)],
        params: &ParamStore,
    ) -> Result<(), RuntimeError> {
        let _ = (inputs, outputs, params);
        Err(RuntimeError::Unsupported {
            device: "this backend".into(),
            what: "running with bound device buffers".into(),
        })
    }

    /// Runs `runs` times timing every kernel on the device's own clock; `None` when this
    /// device cannot time its kernels.
    ///
    /// # Errors
    /// As [`Executable::run`].
    fn profile(
        &self,
        _inputs: &HashMap<String, Tensor>,
        _params: &ParamStore,
        _runs: usize,
    ) -> Result<Option<RunProfile>, RuntimeError> {
        Ok(None)
    }
}

/// One kernel of a profiled program.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTime {
    /// the kernel's name and the source ops it runs
    pub name: String,
    /// its kind: `gemm`, `loop`, a library op, a generated kernel's family
    pub kind: String,
    /// median microseconds per run
    pub micros: f64,
}

/// Per-kernel times of a program, in launch order (what `rlx bench --profile` prints and
/// `--trace` writes).
#[derive(Debug, Clone, PartialEq)]
pub struct RunProfile {
    /// kernels in the order they run
    pub kernels: Vec<KernelTime>,
    /// runs the medians are taken over
    pub runs: usize,
    /// the clock: "cpu wall clock", "cuda events", "gpu timestamps" or "host clock"
    pub clock: &'static str,
}

impl RunProfile {
    /// Microseconds of all kernels of one run (launch gaps excluded).
    pub fn kernel_micros(&self) -> f64 {
        self.kernels.iter().map(|k| k.micros).sum()
    }

    /// A Chrome / Perfetto trace (`chrome://tracing`, ui.perfetto.dev) of one run: the
    /// kernels back to back on one track, each with its kind and source ops.
    pub fn chrome_trace(&self, process: &str) -> String {
        let mut events = vec![serde_json::json!({
            "name": "process_name", "ph": "M", "pid": 1, "tid": 1,
            "args": {"name": process},
        })];
        let mut at = 0.0;
        for k in &self.kernels {
            events.push(serde_json::json!({
                "name": k.name, "cat": k.kind, "ph": "X", "pid": 1, "tid": 1,
                "ts": at, "dur": k.micros, "args": {"kind": k.kind, "clock": self.clock},
            }));
            at += k.micros;
        }
        serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" }).to_string()
    }
}

/// Medians per kernel over runs of the same program (each run's kernels in the same order).
pub fn median_kernels(runs: &[Vec<(String, String, f64)>]) -> Vec<KernelTime> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            let mut t: Vec<f64> = runs.iter().filter_map(|r| r.get(i).map(|k| k.2)).collect();
            t.sort_by(f64::total_cmp);
            KernelTime {
                name: first[i].0.clone(),
                kind: first[i].1.clone(),
                micros: t[t.len() / 2],
            }
        })
        .collect()
}
