//! Small builders on [`Ctx`] that the op mappers compose: each one IR op, folded at import
//! when its inputs are known.

use crate::ctx::{invalid, Ctx, Val, R};
use rlx_ir::{BinaryOp, DType, Dim, Op, ReduceOp, Shape, Tensor, UnaryOp};

impl Ctx {
    /// A scalar constant.
    pub fn scalar(&mut self, dtype: DType, v: f64) -> Val {
        Val::konst(Tensor::scalar(dtype, v))
    }

    /// A scalar constant with the dtype of `like`.
    pub fn scalar_like(&mut self, like: &Val, v: f64) -> Val {
        let d = self.dtype(like);
        self.scalar(d, v)
    }

    /// A 1-D i64 constant.
    pub fn ints(&mut self, v: &[i64]) -> Val {
        let vals: Vec<f64> = v.iter().map(|&x| x as f64).collect();
        Val::konst(Tensor::from_f64(DType::I64, &[v.len()], &vals).expect("sizes match"))
    }

    /// A constant of any shape from values.
    pub fn tensor(&mut self, dtype: DType, shape: &[usize], v: &[f64]) -> R<Val> {
        match Tensor::from_f64(dtype, shape, v) {
            Ok(t) => Ok(Val::konst(t)),
            Err(e) => invalid!("{e}"),
        }
    }

    /// `0, 1, ..., n-1` as a 1-D constant (callers bound `n` by a shape that exists).
    pub fn iota(&mut self, n: usize, dtype: DType) -> Val {
        let v: Vec<f64> = (0..n).map(|i| i as f64).collect();
        Val::konst(Tensor::from_f64(dtype, &[n], &v).expect("sizes match"))
    }

    /// Elementwise unary op.
    pub fn unary(&mut self, u: UnaryOp, x: &Val) -> R<Val> {
        self.op(Op::Unary(u), &[x])
    }

    /// Elementwise binary op with broadcasting.
    pub fn binary(&mut self, b: BinaryOp, x: &Val, y: &Val) -> R<Val> {
        self.op(Op::Binary(b), &[x, y])
    }

    /// x + y
    pub fn add(&mut self, x: &Val, y: &Val) -> R<Val> {
        self.binary(BinaryOp::Add, x, y)
    }

    /// x - y
    pub fn sub(&mut self, x: &Val, y: &Val) -> R<Val> {
        self.binary(BinaryOp::Sub, x, y)
    }

    /// x * y
    pub fn mul(&mut self, x: &Val, y: &Val) -> R<Val> {
        self.binary(BinaryOp::Mul, x, y)
    }

    /// x / y
    pub fn div(&mut self, x: &Val, y: &Val) -> R<Val> {
        self.binary(BinaryOp::Div, x, y)
    }

    /// x op scalar(v), the scalar in x's dtype.
    pub fn binary_scalar(&mut self, b: BinaryOp, x: &Val, v: f64) -> R<Val> {
        let s = self.scalar_like(x, v);
        self.binary(b, x, &s)
    }

    /// `where(c, a, b)`
    pub fn where_(&mut self, c: &Val, a: &Val, b: &Val) -> R<Val> {
        self.op(Op::Where, &[c, a, b])
    }

    /// Converts to `dtype` (no node when it already is).
    pub fn cast(&mut self, x: &Val, dtype: DType) -> R<Val> {
        if self.dtype(x) == dtype {
            return Ok(x.clone());
        }
        self.op(Op::Cast(dtype), &[x])
    }

    /// Reshape to static dims.
    pub fn reshape(&mut self, x: &Val, dims: &[usize]) -> R<Val> {
        self.reshape_dims(x, Shape::of(dims).0)
    }

    /// Reshape to possibly symbolic dims (no node when the shape is unchanged).
    pub fn reshape_dims(&mut self, x: &Val, dims: Vec<Dim>) -> R<Val> {
        if self.dims(x) == dims {
            return Ok(x.clone());
        }
        self.op(Op::Reshape(Shape(dims)), &[x])
    }

    /// Permute dims (no node for the identity).
    pub fn transpose(&mut self, x: &Val, perm: &[usize]) -> R<Val> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x.clone());
        }
        self.op(Op::Transpose(perm.to_vec()), &[x])
    }

    /// Reduction over (normalized) axes.
    pub fn reduce(&mut self, op: ReduceOp, x: &Val, axes: &[usize], keepdims: bool) -> R<Val> {
        let mut axes = axes.to_vec();
        axes.sort();
        axes.dedup();
        self.op(Op::Reduce { op, axes, keepdims }, &[x])
    }

    /// Strided slice of one axis.
    pub fn slice(&mut self, x: &Val, axis: usize, start: i64, end: i64, step: i64) -> R<Val> {
        self.op(
            Op::Slice {
                axes: vec![axis],
                starts: vec![start],
                ends: vec![end],
                steps: vec![step],
            },
            &[x],
        )
    }

    /// Concatenate along an axis (the value itself for one input).
    pub fn concat(&mut self, xs: &[Val], axis: usize) -> R<Val> {
        if xs.len() == 1 {
            return Ok(xs[0].clone());
        }
        let refs: Vec<&Val> = xs.iter().collect();
        self.op(Op::Concat { axis }, &refs)
    }

    /// `x.take(indices, axis)`.
    pub fn gather(&mut self, x: &Val, indices: &Val, axis: usize) -> R<Val> {
        self.op(Op::Gather { axis }, &[x, indices])
    }

    /// Broadcast to dims (no node when unchanged).
    pub fn expand(&mut self, x: &Val, dims: Vec<Dim>) -> R<Val> {
        if self.dims(x) == dims {
            return Ok(x.clone());
        }
        self.op(Op::Expand(Shape(dims)), &[x])
    }

    /// Inserts size-1 dims at the given positions of the result.
    pub fn unsqueeze(&mut self, x: &Val, axes: &[usize]) -> R<Val> {
        let mut dims = self.dims(x);
        let mut axes = axes.to_vec();
        axes.sort();
        for a in axes {
            if a > dims.len() {
                invalid!("unsqueeze axis {a} out of range for rank {}", dims.len());
            }
            dims.insert(a, Dim::Static(1));
        }
        self.reshape_dims(x, dims)
    }

    /// Matrix product (rank >= 2 operands).
    pub fn matmul(&mut self, a: &Val, b: &Val) -> R<Val> {
        self.op(Op::MatMul, &[a, b])
    }

    /// `0, 1, ..., n-1` (i64) laid along dim `axis` of a rank-`rank` value, size 1 elsewhere.
    pub fn iota_along(&mut self, n: usize, axis: usize, rank: usize) -> R<Val> {
        let i = self.iota(n, DType::I64);
        let mut dims = vec![1; rank];
        dims[axis] = n;
        self.reshape(&i, &dims)
    }

    /// `data[c0, c1, ...]` with one i64 coordinate value per dim of `data` (static shape),
    /// broadcast together: the flat position `sum c_d * stride_d`, gathered from `data`
    /// viewed as 1-D. Coordinates must be in range (callers clamp and mask).
    pub fn gather_at(&mut self, data: &Val, coords: &[Val]) -> R<Val> {
        let shape = self.shape(data)?;
        if coords.len() != shape.len() {
            invalid!(
                "{} coordinates for a rank-{} value",
                coords.len(),
                shape.len()
            );
        }
        let strides = rlx_ir::contiguous_strides(&shape);
        let mut flat: Option<Val> = None;
        for (c, &st) in coords.iter().zip(&strides) {
            let c = self.cast(c, DType::I64)?;
            let term = if st == 1 {
                c
            } else {
                self.binary_scalar(BinaryOp::Mul, &c, st as f64)?
            };
            flat = Some(match flat {
                None => term,
                Some(f) => self.add(&f, &term)?,
            });
        }
        let numel: usize = shape.iter().product();
        let flat_data = self.reshape(data, &[numel])?;
        match flat {
            Some(f) => self.gather(&flat_data, &f, 0),
            None => Ok(data.clone()),
        }
    }

    /// Normalizes an ONNX axis against `rank`.
    pub fn axis(&self, axis: i64, rank: usize) -> R<usize> {
        match rlx_ir::normalize_axis(axis, rank) {
            Some(a) => Ok(a),
            None => invalid!("axis {axis} out of range for rank {rank}"),
        }
    }

    /// Normalizes ONNX axes against `rank`, sorted and unique.
    pub fn axes(&self, axes: &[i64], rank: usize) -> R<Vec<usize>> {
        let mut out = Vec::with_capacity(axes.len());
        for &a in axes {
            out.push(self.axis(a, rank)?);
        }
        out.sort();
        if out.windows(2).any(|w| w[0] == w[1]) {
            invalid!("axes {axes:?} repeat");
        }
        Ok(out)
    }
}
