//! `Op::MatMulInteger` on the integer GEMM (`fast::int_gemm`): the weight packed once per
//! bound tensor (at compile time for a constant), the activation rows packed (or quantized,
//! for an f32 activation) per run.

use super::packed_weight::PackedWeight;
use super::WeightSource;
use crate::fast::int_gemm::pack::{dynamic_params, ASource, PackedA, PackedB};
use crate::fast::int_gemm::{self, Isa, Out};
use crate::fast::memory::{Data, DataMut};
use crate::CpuError;
use rlx_ir::{AInput, IntMatMul, Tensor};
use std::collections::HashMap;
use std::sync::Arc;

/// A compiled integer product.
#[derive(Debug)]
pub(crate) struct IntMatMulPlan {
    p: IntMatMul,
    m: usize,
    k: usize,
    n: usize,
    threads: usize,
    isa: Isa,
    /// `b` packed once per bound tensor
    weight: PackedWeight<PackedB>,
}

/// The values of a small integer operand (zero points, bias) as i32.
pub(super) fn ints(d: Data<'_>) -> Vec<i32> {
    match d {
        Data::U8(v) => v.iter().map(|&x| i32::from(x)).collect(),
        Data::I8(v) => v.iter().map(|&x| i32::from(x)).collect(),
        Data::I32(v) => v.to_vec(),
        _ => Vec::new(),
    }
}

impl IntMatMulPlan {
    /// A plan for `a` of `a_numel` values against `b: [k, n]`; `source` says where `b`
    /// comes from when it is a weight (then packed once; a constant right here).
    pub fn new(
        p: IntMatMul,
        a_numel: usize,
        k: usize,
        n: usize,
        threads: usize,
        source: Option<WeightSource>,
    ) -> IntMatMulPlan {
        let plan = IntMatMulPlan {
            p,
            m: a_numel.checked_div(k).unwrap_or(0),
            k,
            n,
            threads,
            isa: Isa::best(),
            weight: PackedWeight::new(source),
        };
        plan.weight
            .prepack(|t| plan.pack(t.data().as_bytes(), t.dtype() == rlx_ir::DType::I8));
        plan
    }

    fn pack(&self, b: &[u8], signed: bool) -> Option<PackedB> {
        (b.len() == self.k * self.n).then(|| PackedB::pack(b, self.k, self.n, signed))
    }

    /// The packed weight for this run: the cached packing while the same tensor is bound,
    /// else a fresh one (kept when `b` is a weight).
    fn packed(
        &self,
        params: &HashMap<String, Arc<Tensor>>,
        b: Data<'_>,
    ) -> Result<Arc<PackedB>, CpuError> {
        let signed = matches!(b, Data::I8(_));
        self.weight.get(params, || {
            self.pack(b.bytes(), signed).ok_or_else(|| {
                CpuError::Invalid(format!(
                    "matmul_integer: b is not {} x {} bytes",
                    self.k, self.n
                ))
            })
        })
    }

    /// Runs the product: `ins` are the op's operands (as `rlx_ir::int_matmul` lists them),
    /// `dst` its result.
    pub fn run(
        &self,
        ins: &[Data<'_>],
        dst: DataMut<'_>,
        params: &HashMap<String, Arc<Tensor>>,
    ) -> Result<(), CpuError> {
        let b = self.packed(params, ins[1])?;
        let za = self
            .p
            .a_zero_input()
            .and_then(|i| ints(ins[i]).first().copied())
            .unwrap_or(0);
        let zb = ints(ins[self.p.b_zero_input()]);
        let f32s = |i: Option<usize>| i.and_then(|i| ins[i].f32());
        let mismatch = || {
            CpuError::Invalid("matmul_integer: operand dtypes the plan was not compiled for".into())
        };
        let mut a_scale = None;
        let src = match (self.p.a, ins[0]) {
            (AInput::Integer, Data::U8(a)) => ASource::U8(a, za),
            (AInput::Integer, Data::I8(a)) => ASource::I8(a, za),
            (AInput::Quantize, Data::F32(x)) => ASource::F32 {
                x,
                scale: f32s(self.p.a_scale_input()).ok_or_else(mismatch)?[0],
                zero: za,
                signed: matches!(ins[2], Data::I8(_)),
            },
            (AInput::Dynamic, Data::F32(x)) => {
                let (scale, zero) = dynamic_params(x);
                a_scale = Some(scale);
                ASource::F32 {
                    x,
                    scale,
                    zero,
                    signed: false,
                }
            }
            _ => return Err(mismatch()),
        };
        let mut a = PackedA::default();
        a.fill(src, self.m, self.k, self.threads);
        // a dynamic activation's scale joins the result's: a_scale * scale, as ONNX Runtime
        // multiplies them before the sums
        let given = f32s(self.p.scale_input());
        let multiplier: Option<std::borrow::Cow<'_, [f32]>> = match (a_scale, given) {
            (Some(sa), Some(s)) => Some(s.iter().map(|&v| sa * v).collect::<Vec<f32>>().into()),
            (Some(sa), None) => Some(vec![sa].into()),
            (None, s) => s.map(Into::into),
        };
        let out = match (dst, multiplier.as_deref()) {
            (DataMut::I32(o), None) => Out::I32(o),
            (DataMut::F32(o), Some(s)) => Out::F32(o, s),
            _ => {
                return Err(CpuError::Invalid(
                    "matmul_integer: result dtype the plan was not compiled for".into(),
                ))
            }
        };
        int_gemm::gemm(self.isa, &a, &b, &zb, out, self.threads);
        Ok(())
    }
}
