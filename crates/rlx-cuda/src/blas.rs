//! cuBLASLt execution of [`GemmSpec`]s. Row-major `C = A * B` runs as the column-major
//! `C^T = B^T * A^T`, so no operand is transposed or copied. Descriptors, layouts and the
//! heuristic's algorithm are prepared once at compile time; a run only calls `cublasLtMatmul`
//! (capturable into a CUDA graph). f16/bf16 run on tensor cores with f32 accumulation; f32
//! uses TF32 tensor cores only when the caller opts in.

use crate::gemm::{Activation, GemmSpec};
use crate::memory::{DeviceBuffer, DeviceMemory};
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

    /// Prepares descriptors, layouts and an algorithm for `spec`.
    ///
    /// # Errors
    /// cuBLASLt rejects the shapes or finds no algorithm.
    pub fn prepare(&self, spec: &GemmSpec, tf32: bool) -> Result<PreparedGemm, CudaError> {
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
        // Column-major view: A' = B (n x k, ld n), B' = A (k x m, ld k), C' = C (n x m, ld n).
        // A transposed B (stored n x k row-major) is the k x n column-major matrix, ld k.
        let b_dims = if spec.trans_b {
            (spec.k, spec.n, spec.b.batch_stride)
        } else {
            (spec.n, spec.k, spec.b.batch_stride)
        };
        let dims = [
            b_dims,
            (spec.k, spec.m, spec.a.batch_stride),
            (spec.n, spec.m, spec.c.batch_stride),
        ];
        for (i, (rows, cols, stride)) in dims.into_iter().enumerate() {
            let l = result::create_matrix_layout(data, rows as u64, cols as u64, rows as i64)
                .map_err(|e| blas_err("cublasLtMatrixLayoutCreate", spec, e))?;
            g.layouts[i] = l;
            if spec.batch > 1 {
                let count = spec.batch as i32;
                let stride = stride as i64;
                // SAFETY: valid layout; attribute sizes match their C types.
                unsafe {
                    result::set_matrix_layout_attribute(l, sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count as *const i32 as *const c_void, 4)
                        .and_then(|_| result::set_matrix_layout_attribute(l, sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride as *const i64 as *const c_void, 8))
                }
                .map_err(|e| blas_err("set batch layout", spec, e))?;
            }
        }
        let pref = result::create_matmul_pref()
            .map_err(|e| blas_err("cublasLtMatmulPreferenceCreate", spec, e))?;
        let ws = WORKSPACE_BYTES as u64;
        // SAFETY: valid preference; u64 attribute.
        let heuristic = unsafe {
            result::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const u64 as *const c_void,
                8,
            )
            .and_then(|_| {
                result::get_matmul_algo_heuristic(
                    self.handle,
                    desc,
                    g.layouts[0],
                    g.layouts[1],
                    g.layouts[2],
                    g.layouts[2],
                    pref,
                )
            })
        };
        // SAFETY: created above, destroyed once.
        let _ = unsafe { result::destroy_matmul_pref(pref) };
        g.algo = Some(
            heuristic
                .map_err(|e| blas_err("cublasLtMatmulAlgoGetHeuristic", spec, e))?
                .algo,
        );
        Ok(g)
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
        // SAFETY: every pointer addresses device memory sized by the plan; layouts match.
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
}

/// A GEMM ready to enqueue.
pub struct PreparedGemm {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: Option<sys::cublasLtMatmulAlgo_t>,
    f64_scale: bool,
    /// what it computes
    pub spec: GemmSpec,
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
