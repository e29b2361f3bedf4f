//! The common frame of library kernels: their operand types, and the final store of each
//! result element, through the fused elementwise epilogue when there is one.

use super::dtype::{storage, store};
use super::{ArgRef, EpilogueCtx, Target};
use rlx_ir::kernel::LibraryKernel;
use rlx_ir::{DType, TensorType};

/// Everything a library-kernel emitter needs.
#[derive(Clone)]
pub struct LibCtx<'a> {
    /// the kernel
    pub kernel: &'a LibraryKernel,
    /// static shapes and dtypes of the operands, in the op's input order
    pub inputs: Vec<(DType, Vec<usize>)>,
    /// dtype and shape of the op's result (before any epilogue)
    pub result: (DType, Vec<usize>),
    /// the fused epilogue, when it runs inside this kernel
    pub epilogue: Option<EpilogueCtx<'a>>,
    /// the device
    pub target: &'a Target,
}

impl<'a> LibCtx<'a> {
    /// Builds the context from buffer types.
    pub fn new(
        kernel: &'a LibraryKernel,
        inputs: &[&TensorType],
        result: &TensorType,
        target: &'a Target,
    ) -> Result<LibCtx<'a>, String> {
        let stat = |t: &TensorType| {
            t.shape
                .as_static()
                .map(|s| (t.dtype, s))
                .ok_or_else(|| format!("kernel `{}`: symbolic shape {t}", kernel.name))
        };
        Ok(LibCtx {
            kernel,
            inputs: inputs.iter().map(|t| stat(t)).collect::<Result<_, _>>()?,
            result: stat(result)?,
            epilogue: kernel.epilogue.as_ref().and_then(EpilogueCtx::fusable),
            target,
        })
    }

    /// The dtype stored to the output buffer.
    pub fn out_dtype(&self) -> DType {
        self.epilogue
            .as_ref()
            .map_or(self.result.0, |e| e.out_dtype())
    }

    /// The output parameter plus the epilogue's extra inputs, comma-led:
    /// `, T* __restrict__ out, const U* __restrict__ ep1 ...`.
    pub fn out_params(&self) -> String {
        let epi = self
            .epilogue
            .as_ref()
            .map(|e| e.params())
            .unwrap_or_default();
        format!(", {}* __restrict__ out{epi}", storage(self.out_dtype()))
    }

    /// Pointer arguments: operands, output, epilogue inputs.
    pub fn args(&self) -> Vec<ArgRef> {
        let mut a: Vec<ArgRef> = self
            .kernel
            .inputs
            .iter()
            .map(|&b| ArgRef::Buffer(b))
            .collect();
        a.push(ArgRef::Buffer(self.kernel.output));
        if let Some(e) = &self.epilogue {
            a.extend(e.args());
        }
        a
    }

    /// Operand parameters `const T* __restrict__ in0, ...` (no trailing comma).
    pub fn in_params(&self) -> String {
        self.inputs
            .iter()
            .enumerate()
            .map(|(i, (d, _))| format!("const {}* __restrict__ in{i}", storage(*d)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Statements storing result element `linear` whose compute value is `value`.
    ///
    /// # Errors
    /// An epilogue node no rule accepts.
    pub fn store(&self, linear: &str, value: &str, ity: &str) -> Result<String, String> {
        self.assign(&format!("out[{linear}]"), value, |e| {
            e.apply(linear, value, ity)
        })
    }

    /// [`LibCtx::store`] into `target` (an lvalue of the output's storage type) for the
    /// element at `row`, `col` of the result seen as a matrix of `n` columns (see
    /// [`EpilogueCtx::apply_at`]).
    ///
    /// # Errors
    /// An epilogue node no rule accepts.
    pub fn store_at(
        &self,
        target: &str,
        at: (&str, &str, usize),
        value: &str,
        ity: &str,
    ) -> Result<String, String> {
        self.assign(target, value, |e| e.apply_at(at, value, ity))
    }

    /// `target = value` in storage form, through the epilogue when there is one (`apply`
    /// gives its statements and the variable holding the result).
    fn assign(
        &self,
        target: &str,
        value: &str,
        apply: impl FnOnce(&EpilogueCtx<'a>) -> Result<(String, String), String>,
    ) -> Result<String, String> {
        match &self.epilogue {
            None => Ok(format!("{target} = {};\n", store(self.result.0, value))),
            Some(e) => {
                let (stmts, var) = apply(e)?;
                Ok(format!("{{\n{stmts}{target} = {var};\n}}\n"))
            }
        }
    }

    /// The epilogue needs a separate kernel (it exists but cannot be fused here).
    pub fn unfused_epilogue(&self) -> bool {
        self.kernel.epilogue.is_some() && self.epilogue.is_none()
    }
}

pub use rlx_ir::render::numel;
