//! Matrix products: `MatMul` (1-D operands promoted and squeezed as numpy does), `Gemm`,
//! `Einsum` as broadcast products and sums over a common index space, and `Det` of small
//! matrices by the Leibniz formula.

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType, ReduceOp};
use std::collections::BTreeMap;

/// `MatMul` with numpy rules for 1-D operands.
pub fn matmul(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    Ok(vec![matmul_np(ctx, &a, &b)?])
}

/// numpy `matmul`: a 1-D left operand is a row, a 1-D right operand a column, and the added
/// dim is removed from the result.
pub fn matmul_np(ctx: &mut Ctx, a: &Val, b: &Val) -> R<Val> {
    if ctx.dtype(a) == DType::Bool {
        unsupported!("MatMul on bool");
    }
    let (ra, rb) = (ctx.rank(a), ctx.rank(b));
    if ra == 0 || rb == 0 {
        invalid!("MatMul operands must not be scalars");
    }
    let a2 = if ra == 1 {
        ctx.unsqueeze(a, &[0])?
    } else {
        a.clone()
    };
    let b2 = if rb == 1 {
        ctx.unsqueeze(b, &[1])?
    } else {
        b.clone()
    };
    let y = ctx.matmul(&a2, &b2)?;
    let mut dims = ctx.dims(&y);
    let r = dims.len();
    if rb == 1 {
        dims.remove(r - 1);
    }
    if ra == 1 {
        dims.remove(r - 2);
    }
    ctx.reshape_dims(&y, dims)
}

/// `Gemm`: alpha * op(A) @ op(B) + beta * C.
pub fn gemm(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    let alpha = n.float("alpha", 1.0)? as f64;
    let beta = n.float("beta", 1.0)? as f64;
    let ta = n.int("transA", 0)? != 0;
    let tb = n.int("transB", 0)? != 0;
    if n.opset < 7 {
        n.int("broadcast", 0)?;
    }
    if ctx.rank(&a) != 2 || ctx.rank(&b) != 2 {
        invalid!("A and B must be 2-D");
    }
    let a = if ta { ctx.transpose(&a, &[1, 0])? } else { a };
    let b = if tb { ctx.transpose(&b, &[1, 0])? } else { b };
    let mut y = ctx.matmul(&a, &b)?;
    if alpha != 1.0 {
        y = ctx.binary_scalar(BinaryOp::Mul, &y, alpha)?;
    }
    if let Some(c) = n.opt(2) {
        let c = if beta != 1.0 {
            ctx.binary_scalar(BinaryOp::Mul, &c, beta)?
        } else {
            c
        };
        y = ctx.add(&y, &c)?;
    }
    Ok(vec![y])
}

/// The first pair of positions holding the same label.
fn repeated_label(labs: &[char]) -> Option<(usize, usize)> {
    (0..labs.len()).find_map(|a| {
        (a + 1..labs.len())
            .find(|&b| labs[b] == labs[a])
            .map(|b| (a, b))
    })
}

/// Label of ellipsis dim `i` of `ell`: right-aligned digits, so operands with fewer
/// ellipsis dims broadcast against the trailing ones as numpy does.
fn ellipsis_label(ell: usize, i: usize) -> char {
    char::from(b'0' + (10 - ell + i) as u8)
}

/// Parsed einsum operand: one label per dim (ellipsis dims get labels from `'A'`).
fn labels(spec: &str, rank: usize) -> R<Vec<char>> {
    let letters: Vec<char> = spec.chars().filter(|c| c.is_ascii_alphabetic()).collect();
    if spec.contains("...") {
        let ell = rank.checked_sub(letters.len()).ok_or_else(|| {
            crate::ctx::Fail::Invalid(format!("operand `{spec}` has more labels than rank {rank}"))
        })?;
        let (pre, post) = spec.split_once("...").expect("contains ...");
        let mut out: Vec<char> = pre.chars().filter(|c| c.is_ascii_alphabetic()).collect();
        if ell > 10 {
            unsupported!("more than 10 ellipsis dims");
        }
        out.extend((0..ell).map(|i| ellipsis_label(ell, i)));
        out.extend(post.chars().filter(|c| c.is_ascii_alphabetic()));
        Ok(out)
    } else if letters.len() != rank {
        invalid!(
            "operand `{spec}` has {} labels for rank {rank}",
            letters.len()
        )
    } else {
        Ok(letters)
    }
}

/// `Einsum`: every operand is aligned to one index space (diagonals taken first), the
/// product is broadcast, and labels absent from the output are summed.
pub fn einsum(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let eq: String = n
        .string_opt("equation")?
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let specs: Vec<&str> = lhs.split(',').collect();
    if specs.len() != n.n_inputs() {
        invalid!(
            "equation has {} operands, node has {}",
            specs.len(),
            n.n_inputs()
        );
    }
    let mut sizes: BTreeMap<char, usize> = BTreeMap::new();
    let mut ops = Vec::new();
    let mut ell_rank = 0;
    for (i, spec) in specs.iter().enumerate() {
        let x = n.input(i)?;
        let shape = ctx.shape(&x)?;
        let mut labs = labels(spec, shape.len())?;
        ell_rank = ell_rank.max(labs.iter().filter(|c| c.is_ascii_digit()).count());
        let mut x = x;
        // Diagonals: a label repeated within one operand.
        while let Some((a, b)) = repeated_label(&labs) {
            let s = ctx.shape(&x)?;
            if s[a] != s[b] {
                invalid!("label `{}` has sizes {} and {}", labs[a], s[a], s[b]);
            }
            let mut dims = vec![1; s.len()];
            dims[a] = s[a];
            dims[b] = s[b];
            let eye = crate::ops::reduce::pair_mask(ctx, s[a], |i, j| i == j)?;
            let eye = ctx.reshape(&eye, &dims)?;
            let zero = ctx.scalar_like(&x, 0.0);
            let m = ctx.where_(&eye, &x, &zero)?;
            x = ctx.reduce(ReduceOp::Sum, &m, &[b], false)?;
            labs.remove(b);
        }
        let s = ctx.shape(&x)?;
        for (l, &d) in labs.iter().zip(&s) {
            match sizes.get(l) {
                Some(&e) if e != d && e != 1 && d != 1 => {
                    invalid!("label `{l}` has sizes {e} and {d}")
                }
                Some(&e) if e >= d => {}
                _ => {
                    sizes.insert(*l, d);
                }
            }
        }
        ops.push((x, labs));
    }
    let out: Vec<char> = match rhs {
        Some(r) => labels(
            &r,
            ell_rank + r.chars().filter(|c| c.is_ascii_alphabetic()).count(),
        )?,
        None => {
            let mut o: Vec<char> = (0..ell_rank).map(|i| ellipsis_label(ell_rank, i)).collect();
            let mut counts: BTreeMap<char, usize> = BTreeMap::new();
            for (_, l) in &ops {
                for c in l.iter().filter(|c| c.is_ascii_alphabetic()) {
                    *counts.entry(*c).or_default() += 1;
                }
            }
            o.extend(counts.into_iter().filter(|&(_, k)| k == 1).map(|(c, _)| c));
            o
        }
    };
    // Index space: output labels first, then the summed ones.
    let mut space = out.clone();
    space.extend(sizes.keys().filter(|c| !out.contains(c)));
    let mut prod: Option<Val> = None;
    for (x, labs) in ops {
        let mut perm: Vec<usize> = Vec::new();
        for l in &space {
            if let Some(p) = labs.iter().position(|c| c == l) {
                perm.push(p);
            }
        }
        let xt = ctx.transpose(&x, &perm)?;
        let s = ctx.shape(&xt)?;
        let mut dims = Vec::new();
        let mut k = 0;
        for l in &space {
            if labs.contains(l) {
                dims.push(s[k]);
                k += 1;
            } else {
                dims.push(1);
            }
        }
        let xr = ctx.reshape(&xt, &dims)?;
        prod = Some(match prod {
            Some(p) => ctx.mul(&p, &xr)?,
            None => xr,
        });
    }
    let Some(mut y) = prod else {
        invalid!("no operands");
    };
    let summed: Vec<usize> = (out.len()..space.len()).collect();
    if !summed.is_empty() {
        y = ctx.reduce(ReduceOp::Sum, &y, &summed, false)?;
    }
    // Labels of the output a broadcast operand left at size 1 are expanded.
    let want: Vec<usize> = out
        .iter()
        .map(|c| sizes.get(c).copied().unwrap_or(1))
        .collect();
    if ctx.shape(&y)? != want {
        y = ctx.expand(&y, rlx_ir::Shape::of(&want).0)?;
    }
    Ok(vec![y])
}

/// `Det` is expanded over all permutations up to this size (120 products of 5 terms).
const DET_MAX: usize = 5;

/// `Det` of `[..., n, n]` for `n <= 5`: `sum_sigma sign(sigma) prod_i a[i, sigma(i)]`.
pub fn det(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let d = ctx.dtype(&x);
    if !d.is_float() || d.is_narrow() {
        unsupported!("dtype {d} is not supported (float only)");
    }
    let xs = ctx.shape(&x)?;
    let r = xs.len();
    if r < 2 || xs[r - 1] != xs[r - 2] {
        invalid!("input {xs:?} must be [..., n, n]");
    }
    let m = xs[r - 1];
    if m == 0 || m > DET_MAX {
        unsupported!("Det of {m}x{m} matrices (1x1 to {DET_MAX}x{DET_MAX} are expanded)");
    }
    let batch = xs[..r - 2].to_vec();
    let mut flat = batch.clone();
    flat.push(m * m);
    let xf = ctx.reshape(&x, &flat)?;
    let last = batch.len();
    let mut entry = Vec::with_capacity(m * m);
    for e in 0..m * m {
        let s = ctx.slice(&xf, last, e as i64, e as i64 + 1, 1)?;
        entry.push(ctx.reshape(&s, &batch)?);
    }
    // permutations in lexicographic order with their signs
    let mut perm: Vec<usize> = (0..m).collect();
    let mut acc: Option<Val> = None;
    loop {
        let inversions = (0..m)
            .flat_map(|i| (i + 1..m).map(move |j| (i, j)))
            .filter(|&(i, j)| perm[i] > perm[j])
            .count();
        let mut term = entry[perm[0]].clone();
        for (i, &p) in perm.iter().enumerate().skip(1) {
            term = ctx.mul(&term, &entry[i * m + p])?;
        }
        acc = Some(match acc {
            None if inversions % 2 == 0 => term,
            None => ctx.unary(rlx_ir::UnaryOp::Neg, &term)?,
            Some(a) if inversions % 2 == 0 => ctx.add(&a, &term)?,
            Some(a) => ctx.sub(&a, &term)?,
        });
        // next permutation
        let Some(i) = (0..m.saturating_sub(1))
            .rev()
            .find(|&i| perm[i] < perm[i + 1])
        else {
            break;
        };
        let j = (i + 1..m)
            .rev()
            .find(|&j| perm[j] > perm[i])
            .unwrap_or(i + 1);
        perm.swap(i, j);
        perm[i + 1..].reverse();
    }
    match acc {
        Some(a) => Ok(vec![a]),
        None => invalid!("empty matrix"),
    }
}
