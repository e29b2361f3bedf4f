//! cuBLASLt execution of [`GemmSpec`]s. Row-major `C = A * B` runs as the column-major
//! `C^T = B^T * A^T`, so no operand is transposed or copied. Descriptors, layouts and the
//! heuristic's algorithm are prepared once at compile time (with autotuning, the fastest of up
//! to eight heuristic candidates timed on the device, [`Blas::tune`]); a run only calls
//! `cublasLtMatmul` (capturable into a CUDA graph). f16/bf16 run on tensor cores with f32 accumulation; f32
//! uses TF32 tensor cores only when the caller opts in. Operands with two batch levels (attention
//! reading `[batch, seq, heads, dim]` in place) run as one pointer-array GEMM, or as a loop of
//! strided-batched calls when cuBLASLt offers no pointer-array algorithm.

use crate::device::CudaDevice;
use crate::gemm::{Activation, GemmSpec, Operand};
use crate::memory::{DeviceBuffer, DeviceMemory};
use crate::tune::{algo_cache, fastest, TuneKey, MAX_CANDIDATES, ROUNDS, TIMED, WARMUP};
use crate::CudaError;
use cudarc::cublaslt::{result, sys};
use rlx_ir::DType;
use std::ffi::c_void;
use std::sync::Arc;

/// Bytes of cuBLASLt workspace per program.
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// A cuBLASLt handle plus its workspace.
pub struct Blas {
    handle: sys::cublasLtHandle_t,
    workspace: DeviceBuffer,
}

// SAFETY: the handle is used under the program's run lock only.
unsafe impl Send for Blas {}
// SAFETY: as above.
unsafe impl Sync for Blas {}

fn blas_err(call: &str, spec: &GemmSpec, e: impl std::fmt::Debug) -> CudaError {
    CudaError::Blas {
        call: call.into(),
        shapes: spec.describe(),
        message: format!("{e:?}"),
    }
}

/// Checks that libcublasLt loads.
///
/// # Errors
/// A sentence naming the missing library.
pub fn cublaslt_present() -> Result<(), String> {
    // SAFETY: only tries to dlopen the library.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(
            "libcublasLt.so.13 not found (add the CUDA toolkit's lib64 folder to LD_LIBRARY_PATH)"
                .into(),
        )
    }
}

impl Blas {
    /// A handle and workspace.
    ///
    /// # Errors
    /// cuBLASLt is missing or the workspace cannot be allocated.
    pub fn new(mem: &Arc<DeviceMemory>) -> Result<Blas, CudaError> {
        cublaslt_present().map_err(CudaError::Unavailable)?;
        let workspace = mem.alloc(WORKSPACE_BYTES)?;
        let handle = result::create_handle().map_err(|e| CudaError::Blas {
            call: "cublasLtCreate".into(),
            shapes: String::new(),
            message: format!("{e:?}"),
        })?;
        Ok(Blas { handle, workspace })
    }

    /// Prepares descriptors, layouts and an algorithm for `spec`; two batch levels become a
    /// pointer-array GEMM when `pointer_arrays` allows and cuBLASLt has an algorithm for it.
    ///
    /// # Errors
    /// cuBLASLt rejects the shapes or finds no algorithm.
    pub fn prepare(
        &self,
        spec: &GemmSpec,
        tf32: bool,
        pointer_arrays: bool,
    ) -> Result<PreparedGemm, CudaError> {
        let (data, compute, scale) = match spec.dtype {
            DType::F32 if tf32 => (
                sys::cudaDataType::CUDA_R_32F,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
                sys::cudaDataType::CUDA_R_32F,
            ),
            DType::F32 => (
                sys::cudaDataType::CUDA_R_32F,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cudaDataType::CUDA_R_32F,
            ),
            DType::F16 => (
                sys::cudaDataType::CUDA_R_16F,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cudaDataType::CUDA_R_32F,
            ),
            DType::BF16 => (
                sys::cudaDataType::CUDA_R_16BF,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cudaDataType::CUDA_R_32F,
            ),
            DType::F64 => (
                sys::cudaDataType::CUDA_R_64F,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_64F,
                sys::cudaDataType::CUDA_R_64F,
            ),
            other => {
                return Err(blas_err(
                    "prepare",
                    spec,
                    format!("dtype {other} has no GEMM"),
                ))
            }
        };
        let desc = result::create_matmul_desc(compute, scale)
            .map_err(|e| blas_err("cublasLtMatmulDescCreate", spec, e))?;
        let mut g = PreparedGemm {
            desc,
            layouts: [std::ptr::null_mut(); 3],
            algo: None,
            f64_scale: spec.dtype == DType::F64,
            batching: Batching::Strided,
            spec: spec.clone(),
        };
        let epilogue = match (spec.bias.is_some(), spec.activation) {
            (false, Activation::None) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
            (false, Activation::Relu) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU,
            (false, Activation::GeluTanh) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU,
            (true, Activation::None) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            (true, Activation::Relu) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS,
            (true, Activation::GeluTanh) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
        };
        // SAFETY: the descriptor is valid; the value is a 4-byte enum as the attribute expects.
        unsafe {
            let v = epilogue as u32;
            result::set_matmul_desc_attribute(
                desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE,
                &v as *const u32 as *const c_void,
                4,
            )
        }
        .map_err(|e| blas_err("set epilogue", spec, e))?;
        if spec.trans_b {
            // SAFETY: valid descriptor; cublasOperation_t is a 4-byte enum (CUBLAS_OP_T = 1).
            unsafe {
                let t: i32 = 1;
                result::set_matmul_desc_attribute(
                    desc,
                    sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                    &t as *const i32 as *const c_void,
                    4,
                )
            }
            .map_err(|e| blas_err("set transpose", spec, e))?;
        }
        // Two batch levels run as one pointer-array GEMM when cuBLASLt has an algorithm for
        // it, else as one strided-batched call per outer batch.
        if spec.outer > 1 && pointer_arrays {
            if let Ok((layouts, algo)) = self.plan_layouts(spec, desc, data, Batching::PointerArray)
            {
                g.layouts = layouts;
                g.algo = Some(algo);
                g.batching = Batching::PointerArray;
                return Ok(g);
            }
        }
        if spec.outer > 1 {
            g.batching = Batching::Loop;
        }
        let (layouts, algo) = self.plan_layouts(spec, desc, data, g.batching)?;
        g.layouts = layouts;
        g.algo = Some(algo);
        Ok(g)
    }

    /// Creates the three layouts (A', B', C' of the column-major view) for `batching` and
    /// asks the heuristic for an algorithm; the layouts are destroyed again on failure.
    fn plan_layouts(
        &self,
        spec: &GemmSpec,
        desc: sys::cublasLtMatmulDesc_t,
        data: sys::cudaDataType,
        batching: Batching,
    ) -> Result<([sys::cublasLtMatrixLayout_t; 3], sys::cublasLtMatmulAlgo_t), CudaError> {
        let mut layouts = [std::ptr::null_mut(); 3];
        let r = self.fill_layouts(spec, desc, data, batching, &mut layouts);
        if r.is_err() {
            for l in layouts.into_iter().filter(|l| !l.is_null()) {
                // SAFETY: created above, destroyed once.
                let _ = unsafe { result::destroy_matrix_layout(l) };
            }
        }
        r.map(|algo| (layouts, algo))
    }

    fn fill_layouts(
        &self,
        spec: &GemmSpec,
        desc: sys::cublasLtMatmulDesc_t,
        data: sys::cudaDataType,
        batching: Batching,
        layouts: &mut [sys::cublasLtMatrixLayout_t; 3],
    ) -> Result<sys::cublasLtMatmulAlgo_t, CudaError> {
        use sys::cublasLtMatrixLayoutAttribute_t as L;
        // Column-major view: A' = B (n x k, ld n), B' = A (k x m, ld k), C' = C (n x m, ld n);
        // padded rows make the row stride the leading dimension. A transposed B (stored
        // n x k row-major) is the k x n column-major matrix, ld k.
        let b_dims = if spec.trans_b {
            (spec.k, spec.n)
        } else {
            (spec.n, spec.k)
        };
        let dims = [
            (b_dims, &spec.b),
            ((spec.k, spec.m), &spec.a),
            ((spec.n, spec.m), &spec.c),
        ];
        let count = match batching {
            Batching::PointerArray => spec.outer * spec.batch,
            Batching::Strided | Batching::Loop => spec.batch,
        };
        for (i, ((rows, cols), op)) in dims.into_iter().enumerate() {
            let ld = op.row_stride.unwrap_or(rows);
            let l = result::create_matrix_layout(data, rows as u64, cols as u64, ld as i64)
                .map_err(|e| blas_err("cublasLtMatrixLayoutCreate", spec, e))?;
            layouts[i] = l;
            if count > 1 {
                let n = count as i32;
                let stride = op.batch_stride as i64;
                let mode = sys::cublasLtBatchMode_t::CUBLASLT_BATCH_MODE_POINTER_ARRAY as i32;
                // SAFETY: valid layout; attribute sizes match their C types.
                unsafe {
                    result::set_matrix_layout_attribute(
                        l,
                        L::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                        &n as *const i32 as *const c_void,
                        4,
                    )
                    .and_then(|_| match batching {
                        Batching::PointerArray => result::set_matrix_layout_attribute(
                            l,
                            L::CUBLASLT_MATRIX_LAYOUT_BATCH_MODE,
                            &mode as *const i32 as *const c_void,
                            4,
                        ),
                        Batching::Strided | Batching::Loop => result::set_matrix_layout_attribute(
                            l,
                            L::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                            &stride as *const i64 as *const c_void,
                            8,
                        ),
                    })
                }
                .map_err(|e| blas_err("set batch layout", spec, e))?;
            }
        }
        self.heuristic(spec, desc, layouts)
    }

    /// A matmul preference telling the heuristic the workspace size and how aligned each
    /// operand's matrices are (offsets and strides may leave fewer than the 256 bytes it
    /// assumes by default). The caller destroys it.
    fn preference(&self, spec: &GemmSpec) -> Result<sys::cublasLtMatmulPreference_t, CudaError> {
        use sys::cublasLtMatmulPreferenceAttributes_t as P;
        let pref = result::create_matmul_pref()
            .map_err(|e| blas_err("cublasLtMatmulPreferenceCreate", spec, e))?;
        let ws = WORKSPACE_BYTES as u64;
        let size = spec.dtype.size_bytes();
        let align = [
            (
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                spec.b.alignment(size),
            ),
            (
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                spec.a.alignment(size),
            ),
            (
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                spec.c.alignment(size),
            ),
            (
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                spec.c.alignment(size),
            ),
        ];
        // SAFETY: valid preference; attribute sizes match their C types.
        let set = unsafe {
            align
                .iter()
                .try_for_each(|(attr, a)| {
                    result::set_matmul_pref_attribute(
                        pref,
                        *attr,
                        a as *const u32 as *const c_void,
                        4,
                    )
                })
                .and_then(|_| {
                    result::set_matmul_pref_attribute(
                        pref,
                        P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                        &ws as *const u64 as *const c_void,
                        8,
                    )
                })
        };
        match set {
            Ok(()) => Ok(pref),
            Err(e) => {
                // SAFETY: created above, destroyed once.
                let _ = unsafe { result::destroy_matmul_pref(pref) };
                Err(blas_err("cublasLtMatmulPreferenceSetAttribute", spec, e))
            }
        }
    }

    /// The heuristic's first algorithm for prepared layouts (see [`Blas::preference`]).
    fn heuristic(
        &self,
        spec: &GemmSpec,
        desc: sys::cublasLtMatmulDesc_t,
        layouts: &[sys::cublasLtMatrixLayout_t; 3],
    ) -> Result<sys::cublasLtMatmulAlgo_t, CudaError> {
        let pref = self.preference(spec)?;
        // SAFETY: valid handle, preference, descriptor and layouts.
        let heuristic = unsafe {
            result::get_matmul_algo_heuristic(
                self.handle,
                desc,
                layouts[0],
                layouts[1],
                layouts[2],
                layouts[2],
                pref,
            )
        };
        // SAFETY: created above, destroyed once.
        let _ = unsafe { result::destroy_matmul_pref(pref) };
        Ok(heuristic
            .map_err(|e| blas_err("cublasLtMatmulAlgoGetHeuristic", spec, e))?
            .algo)
    }

    /// Algorithms worth timing for a prepared GEMM: its current one first, then up to
    /// `max - 1` more of the heuristic's list for the same descriptor and layouts (hence the
    /// same compute and scale types), within the workspace, and, for f16/bf16, only
    /// split-K variants that reduce in the f32 compute type (no reduction in the 16-bit
    /// output type or in place in the output).
    pub fn candidates(
        &self,
        g: &PreparedGemm,
        max: usize,
    ) -> Result<Vec<sys::cublasLtMatmulAlgo_t>, CudaError> {
        let spec = &g.spec;
        let mut out: Vec<sys::cublasLtMatmulAlgo_t> = g.algo.into_iter().collect();
        let pref = self.preference(spec)?;
        let mut results: Vec<sys::cublasLtMatmulHeuristicResult_t> = Vec::with_capacity(max);
        let mut count: i32 = 0;
        // SAFETY: valid handle, preference, descriptor and layouts; the array holds `max`
        // results and the call writes at most that many.
        let status = unsafe {
            sys::cublasLtMatmulAlgoGetHeuristic(
                self.handle,
                g.desc,
                g.layouts[0],
                g.layouts[1],
                g.layouts[2],
                g.layouts[2],
                pref,
                max as i32,
                results.as_mut_ptr(),
                &mut count,
            )
        };
        // SAFETY: created above, destroyed once.
        let _ = unsafe { result::destroy_matmul_pref(pref) };
        if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Ok(out);
        }
        // SAFETY: the call initialized `count` (at most `max`) results.
        unsafe { results.set_len((count.max(0) as usize).min(max)) };
        let half = matches!(spec.dtype, DType::F16 | DType::BF16);
        for r in results {
            if out.len() >= max {
                break;
            }
            if r.state != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                || r.workspaceSize > WORKSPACE_BYTES
                || out.iter().any(|a| a.data == r.algo.data)
                || (half && !f32_reduction(&r.algo))
            {
                continue;
            }
            out.push(r.algo);
        }
        Ok(out)
    }

    /// Times each of [`Blas::candidates`] on the operands `p` (the program's own buffers;
    /// timing is data-independent) and keeps the fastest in `g`; a candidate that fails to
    /// run is skipped, and when all fail `g` keeps its algorithm. Choices are cached per
    /// process by [`TuneKey`], so identical GEMMs are timed once. Returns whether this call
    /// timed anything (false on a cache hit).
    ///
    /// # Errors
    /// A device failure after timing (a candidate broke the context).
    pub fn tune(
        &self,
        g: &mut PreparedGemm,
        p: &GemmPointers,
        device: &CudaDevice,
        tf32: bool,
    ) -> Result<bool, CudaError> {
        let key = TuneKey::new(&g.spec, tf32, g.batching);
        let cache = algo_cache();
        if let Some(data) = cache.get(&key) {
            g.algo = Some(sys::cublasLtMatmulAlgo_t { data });
            return Ok(false);
        }
        let original = g.algo;
        let candidates = self.candidates(g, MAX_CANDIDATES)?;
        let chosen = if candidates.len() > 1 {
            fastest(candidates.len(), ROUNDS, |i| {
                g.algo = Some(candidates[i]);
                self.time(g, p, device).ok()
            })
            .map(|(i, _)| candidates[i])
        } else {
            None
        };
        g.algo = chosen.or(original);
        device.sync()?;
        if let Some(a) = g.algo {
            cache.insert(key, a.data);
        }
        Ok(true)
    }

    /// Milliseconds per launch of `g` as it stands (see [`CudaDevice::time_enqueued`]).
    fn time(
        &self,
        g: &PreparedGemm,
        p: &GemmPointers,
        device: &CudaDevice,
    ) -> Result<f64, CudaError> {
        let stream = device.stream();
        device.time_enqueued(WARMUP, TIMED, || self.run(g, p, stream))
    }

    /// Enqueues `g` on `stream` with resolved device pointers (element offsets already
    /// applied by the caller).
    ///
    /// # Errors
    /// cuBLASLt refuses the call.
    pub fn run(
        &self,
        g: &PreparedGemm,
        p: &GemmPointers,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), CudaError> {
        let GemmPointers {
            a,
            b,
            c,
            bias,
            residual,
            arrays,
        } = *p;
        if let Some(bias) = bias {
            // SAFETY: valid descriptor; a device pointer attribute.
            unsafe {
                result::set_matmul_desc_attribute(
                    g.desc,
                    sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    &bias as *const u64 as *const c_void,
                    8,
                )
            }
            .map_err(|e| blas_err("set bias pointer", &g.spec, e))?;
        }
        let spec = &g.spec;
        match g.batching {
            Batching::Strided => self.matmul(g, [a, b, c], residual, stream),
            Batching::PointerArray => {
                let table = arrays.ok_or_else(|| {
                    blas_err("cublasLtMatmul", spec, "pointer arrays were not uploaded")
                })?;
                let n = (spec.outer * spec.batch * 8) as u64;
                self.matmul(g, [table, table + n, table + 2 * n], None, stream)
            }
            Batching::Loop => {
                let size = spec.dtype.size_bytes() as u64;
                (0..spec.outer as u64).try_for_each(|o| {
                    let step = |p: u64, op: &Operand| p + o * op.outer_stride as u64 * size;
                    self.matmul(
                        g,
                        [step(a, &spec.a), step(b, &spec.b), step(c, &spec.c)],
                        residual.map(|r| step(r, &spec.c)),
                        stream,
                    )
                })
            }
        }
    }

    /// One `cublasLtMatmul` call: `[a, b, c]` in the row-major naming (swapped here for the
    /// column-major view).
    fn matmul(
        &self,
        g: &PreparedGemm,
        [a, b, c]: [u64; 3],
        residual: Option<u64>,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), CudaError> {
        // With a residual, C is that tensor and beta = 1 (D = alpha A B + C); else C = D, beta 0.
        let beta_v = if residual.is_some() { 1.0 } else { 0.0 };
        let (alpha32, zero32, alpha64, zero64) =
            (g.spec.alpha as f32, beta_v as f32, g.spec.alpha, beta_v);
        let c_in = residual.unwrap_or(c);
        let (alpha, beta) = if g.f64_scale {
            (
                &alpha64 as *const f64 as *const c_void,
                &zero64 as *const f64 as *const c_void,
            )
        } else {
            (
                &alpha32 as *const f32 as *const c_void,
                &zero32 as *const f32 as *const c_void,
            )
        };
        let algo = g.algo.as_ref().map_or(std::ptr::null(), |a| a as *const _);
        // SAFETY: every pointer addresses device memory sized by the plan (or, in pointer-array
        // mode, a device table of such pointers); layouts match.
        unsafe {
            result::matmul(
                self.handle,
                g.desc,
                alpha,
                beta,
                b as *const c_void,
                g.layouts[0],
                a as *const c_void,
                g.layouts[1],
                c_in as *const c_void,
                g.layouts[2],
                c as *mut c_void,
                g.layouts[2],
                algo,
                self.workspace.ptr() as *mut c_void,
                WORKSPACE_BYTES,
                stream as sys::cudaStream_t,
            )
        }
        .map_err(|e| blas_err("cublasLtMatmul", &g.spec, e))
    }
}

/// True when `algo` does not split K, or reduces its K splits in the compute type (f32):
/// the split-K variants safe for 16-bit outputs.
fn f32_reduction(algo: &sys::cublasLtMatmulAlgo_t) -> bool {
    use sys::cublasLtMatmulAlgoConfigAttributes_t as C;
    let get = |attr: C| -> Option<u32> {
        let mut v: u32 = 0;
        let mut written = 0usize;
        // SAFETY: a valid algorithm struct; both attributes are 4-byte values.
        let status = unsafe {
            sys::cublasLtMatmulAlgoConfigGetAttribute(
                algo,
                attr,
                &mut v as *mut u32 as *mut c_void,
                4,
                &mut written,
            )
        };
        (status == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS && written == 4).then_some(v)
    };
    match get(C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM) {
        Some(0 | 1) => true,
        Some(_) => {
            get(C::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)
                == Some(
                    sys::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE as u32,
                )
        }
        None => false,
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { result::destroy_handle(self.handle) };
    }
}

/// Device addresses of one GEMM's operands (element offsets applied).
#[derive(Debug, Clone, Copy)]
pub struct GemmPointers {
    /// left operand
    pub a: u64,
    /// right operand
    pub b: u64,
    /// result
    pub c: u64,
    /// bias of length n, when fused
    pub bias: Option<u64>,
    /// result-shaped tensor added as cuBLASLt's C, when fused
    pub residual: Option<u64>,
    /// the device table of a pointer-array GEMM ([`PreparedGemm::pointer_table`])
    pub arrays: Option<u64>,
}

/// How a prepared GEMM walks its batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Batching {
    /// one call, one stride per operand (or no batches)
    Strided,
    /// two batch levels in one call, through device tables of matrix pointers
    PointerArray,
    /// two batch levels as one strided-batched call per outer batch (cuBLASLt offered no
    /// pointer-array algorithm, or `RLX_CUDA_PTR_ARRAY=0`)
    Loop,
}

/// A GEMM ready to enqueue.
pub struct PreparedGemm {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: Option<sys::cublasLtMatmulAlgo_t>,
    f64_scale: bool,
    /// how batches run
    pub batching: Batching,
    /// what it computes
    pub spec: GemmSpec,
}

impl PreparedGemm {
    /// For a pointer-array GEMM, the host copy of its device table: the address of every
    /// matrix of A, then of B, then of C, batch `o * batch + i` in order, given each operand's
    /// base address (its buffer's, offsets not applied). None for the other batchings.
    pub fn pointer_table(&self, base: impl Fn(&Operand) -> u64) -> Option<Vec<u64>> {
        if self.batching != Batching::PointerArray {
            return None;
        }
        let s = &self.spec;
        let size = s.dtype.size_bytes() as u64;
        let mut table = Vec::with_capacity(3 * s.outer * s.batch);
        for op in [&s.a, &s.b, &s.c] {
            let b = base(op);
            for o in 0..s.outer {
                for i in 0..s.batch {
                    table.push(b + op.at(o, i) as u64 * size);
                }
            }
        }
        Some(table)
    }
}

// SAFETY: descriptors are plain host objects used under the program's run lock.
unsafe impl Send for PreparedGemm {}
// SAFETY: as above.
unsafe impl Sync for PreparedGemm {}

impl Drop for PreparedGemm {
    fn drop(&mut self) {
        // SAFETY: each created once, destroyed once.
        unsafe {
            for l in self.layouts {
                if !l.is_null() {
                    let _ = result::destroy_matrix_layout(l);
                }
            }
            let _ = result::destroy_matmul_desc(self.desc);
        }
    }
}
