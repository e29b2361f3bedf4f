//! Fused elementwise epilogues of library kernels: the epilogue kernel's expression DAG
//! applied to each result element inside the library kernel.

use super::dialect::CudaC;
use super::dtype::{storage, store};
use super::index::{contiguous, IndexSpace};
use super::vector::Wide;
use super::ArgRef;
use rlx_ir::kernel::LoopKernel;
use rlx_ir::render::{coords, emit_nodes, epilogue_nodes, epilogue_space, offset, Operand};
use rlx_ir::DType;

/// Elements [`EpilogueCtx::apply_wide`] handles at once: one 16-byte vector of 16-bit floats.
pub const WIDE: usize = 8;

/// A library kernel's fused elementwise epilogue, applied to each result element inside the
/// library kernel itself. Input 0 is the library value; the others are read through their
/// views at the element's coordinates.
#[derive(Clone)]
pub struct EpilogueCtx<'a> {
    /// the epilogue kernel
    pub kernel: &'a LoopKernel,
    /// names of the extra parameters: `{prefix}1`, `{prefix}2`, ... (`ep` unless two
    /// epilogues share a kernel, see [`EpilogueCtx::named`])
    pub prefix: &'static str,
}

impl<'a> EpilogueCtx<'a> {
    /// Wraps an epilogue when it can be fused: elementwise, and input 0 read as the
    /// contiguous result itself (so each element only needs its own library value).
    pub fn fusable(kernel: &'a LoopKernel) -> Option<EpilogueCtx<'a>> {
        kernel.fusable_epilogue().then_some(EpilogueCtx {
            kernel,
            prefix: "ep",
        })
    }

    /// The same epilogue with its extra parameters named `{prefix}1, ...` (a kernel that
    /// applies two epilogues names one of them apart).
    pub fn named(self, prefix: &'static str) -> EpilogueCtx<'a> {
        EpilogueCtx { prefix, ..self }
    }

    /// The dtype the library must produce (input 0's dtype).
    pub fn input_dtype(&self) -> DType {
        self.kernel.inputs[0].dtype
    }

    /// The dtype stored to the output.
    pub fn out_dtype(&self) -> DType {
        self.kernel.out_dtype()
    }

    /// Extra kernel parameters (`const T* __restrict__ epN`) for inputs 1.., comma-led.
    pub fn params(&self) -> String {
        self.kernel.inputs[1..]
            .iter()
            .enumerate()
            .map(|(i, inp)| {
                format!(
                    ", const {}* __restrict__ {}{}",
                    storage(inp.dtype),
                    self.prefix,
                    i + 1
                )
            })
            .collect()
    }

    /// The extra inputs read as whole tensors of the result's shape, element for element
    /// (a residual): parameter name, element offset and dtype of each.
    pub fn full_inputs(&self) -> Vec<(String, usize, DType)> {
        let whole = contiguous(&self.kernel.shape);
        self.kernel.inputs[1..]
            .iter()
            .enumerate()
            .filter(|(_, inp)| inp.view.strides == whole)
            .map(|(i, inp)| {
                (
                    format!("{}{}", self.prefix, i + 1),
                    inp.view.offset,
                    inp.dtype,
                )
            })
            .collect()
    }

    /// Extra pointer arguments, matching [`EpilogueCtx::params`].
    pub fn args(&self) -> Vec<ArgRef> {
        self.kernel.inputs[1..]
            .iter()
            .map(|i| ArgRef::Buffer(i.buffer))
            .collect()
    }

    /// Statements computing the stored value for element `linear` whose library value (a
    /// compute value of [`EpilogueCtx::input_dtype`]) is `value`; returns them and the name
    /// of the variable holding the stored-form result.
    ///
    /// # Errors
    /// A node the rules do not accept.
    pub fn apply(&self, linear: &str, value: &str, ity: &str) -> Result<(String, String), String> {
        let sp = epilogue_space(self.kernel);
        let at = coords(&CudaC, linear, "q", &sp.dims, ity);
        self.apply_coords(&sp, at, value)
    }

    /// [`EpilogueCtx::apply`] for the element at `row` and `col` of the result seen as a
    /// matrix of `n` columns. When the epilogue's index space keeps those columns as its
    /// last dim, `col` is that coordinate as it is (no division of a linear index, and
    /// neighbouring columns read neighbouring elements); otherwise the linear index.
    ///
    /// # Errors
    /// A node the rules do not accept.
    pub fn apply_at(
        &self,
        (row, col, n): (&str, &str, usize),
        value: &str,
        ity: &str,
    ) -> Result<(String, String), String> {
        let sp = epilogue_space(self.kernel);
        let at = match sp.dims.split_last() {
            Some((&last, lead)) if last == n => {
                let mut at = coords(&CudaC, row, "q", lead, ity);
                at += &format!("const {ity} q{} = {col};\n", lead.len());
                at
            }
            _ => coords(
                &CudaC,
                &format!("(({ity}){row} * {n} + {col})"),
                "q",
                &sp.dims,
                ity,
            ),
        };
        self.apply_coords(&sp, at, value)
    }

    /// [`EpilogueCtx::apply_at`] for the `WIDE` (8) elements at `row`, columns `col ..` of the
    /// result seen as a matrix of `n` columns (`col` a multiple of `WIDE`), whose library
    /// values are `values`: each extra input read once as a `WIDE`-element vector (a whole
    /// tensor, or a row repeated over rows such as a bias) or as a single value. Returns the
    /// statements and each element's stored-form result; None when an input is read any
    /// other way, or its offset or dtype allows no vector (then apply element by element).
    ///
    /// # Errors
    /// A node the rules do not accept.
    pub fn apply_wide(
        &self,
        (row, col, n): (&str, &str, usize),
        values: &[String],
        ity: &str,
    ) -> Option<Result<(String, Vec<String>), String>> {
        let k = self.kernel;
        let sp = epilogue_space(self.kernel);
        // the index space as rows of n columns, or one run of elements
        let two = match sp.dims.as_slice() {
            [_, last] if *last == n => true,
            [_] => false,
            _ => return None,
        };
        let mut loads = String::new();
        let mut vectors = vec![None; k.inputs.len()];
        for (i, inp) in k.inputs.iter().enumerate().skip(1) {
            let aligned = inp.view.offset.is_multiple_of(WIDE);
            let full = format!("({ity}){row} * {n} + {col}");
            let at = match (sp.strides[i].as_slice(), two) {
                ([0, 0], true) | ([0], false) => continue,
                ([o, 1], true) if *o == n as isize && aligned => full,
                ([1], false) if aligned => full,
                ([0, 1], true) if aligned => col.to_string(),
                _ => return None,
            };
            let w = Wide::new(inp.dtype, WIDE)?;
            let var = format!("{}v{i}", self.prefix);
            loads += &w.load(
                &var,
                &format!("{}{i}", self.prefix),
                &format!("{} + {at}", inp.view.offset),
            );
            vectors[i] = Some((w, var));
        }
        let need = k.needed(&[k.result]);
        let mut body = loads;
        let mut outs = Vec::with_capacity(WIDE);
        for (l, value) in values.iter().enumerate().take(WIDE) {
            let mut elem = |i: usize| match &vectors[i] {
                _ if i == 0 => Operand::Value(value.clone()),
                Some((w, var)) => Operand::Stored(w.elem(var, l)),
                None => Operand::Stored(format!("{}{i}[{}]", self.prefix, k.inputs[i].view.offset)),
            };
            let prefix = format!("{}e{l}_", self.prefix);
            match emit_nodes(&CudaC, k, &need, &prefix, &mut elem, None) {
                Ok(text) => body += &text,
                Err(e) => return Some(Err(e)),
            }
            outs.push(store(k.out_dtype(), &format!("{prefix}{}", k.result)));
        }
        Some(Ok((body, outs)))
    }

    /// The statements of [`EpilogueCtx::apply`] once the coordinates `q0..` are defined by
    /// `at`.
    fn apply_coords(
        &self,
        sp: &IndexSpace,
        at: String,
        value: &str,
    ) -> Result<(String, String), String> {
        let k = self.kernel;
        let mut s = format!("{{\n{at}");
        let mut read = |i: usize, strides: &[isize]| {
            let off = offset(&k.inputs[i].view.offset.to_string(), "q", strides);
            Operand::Stored(format!("{}{i}[{off}]", self.prefix))
        };
        s += &epilogue_nodes(&CudaC, k, sp, value, &mut read)?;
        s += &format!(
            "rlx_epi_out = {};\n}}\n",
            store(k.out_dtype(), &format!("p{}", k.result))
        );
        let decl = format!("{} rlx_epi_out;\n", storage(k.out_dtype()));
        Ok((decl + &s, "rlx_epi_out".into()))
    }
}
