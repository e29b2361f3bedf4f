//! Tensor ops of the `ai.onnx.ml` domain over IR ops: `Binarizer` (a comparison) and
//! `ArrayFeatureExtractor` (a gather along the last axis), `TreeEnsemble` (a sum over its
//! leaves of path indicators times weights). `LabelEncoder`, which may map
//! strings, is in the value registry ([`crate::ops::values`]).

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType};

/// `Binarizer`: `x > threshold` as 1 or 0 in x's dtype.
pub fn binarizer(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let d = ctx.dtype(&x);
    if d.is_narrow() || d == DType::Bool {
        unsupported!("dtype {d} is not supported");
    }
    let th = n.float("threshold", 0.0)? as f64;
    let t = ctx.scalar(d, th);
    let gt = ctx.binary(BinaryOp::Gt, &x, &t)?;
    Ok(vec![ctx.cast(&gt, d)?])
}

/// `ArrayFeatureExtractor`: the last axis of `x` taken at the (flattened) indices; a 1-D
/// input gives one row, as ONNX Runtime does.
pub fn array_feature_extractor(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, idx) = (n.input(0)?, n.input(1)?);
    if !ctx.dtype(&idx).is_int() {
        unsupported!("indices of dtype {}", ctx.dtype(&idx));
    }
    let k = ctx.shape(&idx)?.iter().product::<usize>();
    let idx = ctx.reshape(&idx, &[k])?;
    let x = if ctx.rank(&x) == 1 {
        ctx.unsqueeze(&x, &[0])?
    } else {
        x
    };
    let r = ctx.rank(&x);
    Ok(vec![ctx.gather(&x, &idx, r - 1)?])
}

/// The mapper for a tensor op of the `ai.onnx.ml` domain.
pub fn lookup(op_type: &str) -> Option<crate::ops::Mapper> {
    Some(match op_type {
        "Binarizer" => binarizer,
        "ArrayFeatureExtractor" => array_feature_extractor,
        "TreeEnsemble" => tree_ensemble,
        _ => return None,
    })
}

/// A tensor attribute's values, if present.
fn tensor_values(n: &NodeIn, name: &str) -> R<Option<Vec<f64>>> {
    let Some(t) = n.tensor_opt(name)? else {
        return Ok(None);
    };
    let t = crate::tensor::to_tensor(t, &mut crate::tensor::ExternalData::new(None))
        .map_err(crate::ctx::Fail::Unsupported)?;
    Ok(Some(t.to_f64_vec()))
}

/// Root-to-leaf paths a tree ensemble may expand into.
const MAX_PATHS: usize = 1 << 14;

/// `TreeEnsemble` (ai.onnx.ml 5) as a sum over leaves: each leaf's indicator is the `and` of
/// the comparisons on its root-to-leaf path, the results the indicators times the leaves'
/// weights gathered per target (`SUM`, `AVERAGE`) or reduced (`MIN`, `MAX`).
pub fn tree_ensemble(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let d = ctx.dtype(&x);
    if !matches!(d, DType::F32 | DType::F64 | DType::F16) {
        unsupported!("dtype {d} is not supported (f16, f32, f64)");
    }
    let xs = ctx.shape(&x)?;
    if xs.len() != 2 {
        invalid!("X {xs:?} must be (rows, features)");
    }
    let rows = xs[0];
    let ints = |name: &str| -> R<Vec<i64>> {
        match n.ints_opt(name)? {
            Some(v) => Ok(v),
            None => invalid!("attribute `{name}` is required"),
        }
    };
    let feat = ints("nodes_featureids")?;
    let true_ids = ints("nodes_truenodeids")?;
    let false_ids = ints("nodes_falsenodeids")?;
    let true_leaf = ints("nodes_trueleafs")?;
    let false_leaf = ints("nodes_falseleafs")?;
    let targets = ints("leaf_targetids")?;
    let roots = ints("tree_roots")?;
    let Some(modes) = tensor_values(n, "nodes_modes")? else {
        invalid!("attribute `nodes_modes` is required");
    };
    let splits = tensor_values(n, "nodes_splits")?.unwrap_or_default();
    let Some(weights) = tensor_values(n, "leaf_weights")? else {
        invalid!("attribute `leaf_weights` is required");
    };
    let members = tensor_values(n, "membership_values")?.unwrap_or_default();
    let missing = n.ints_opt("nodes_missing_value_tracks_true")?;
    let _ = tensor_values(n, "nodes_hitrates")?; // no effect on values
    let agg = n.int("aggregate_function", 1)?;
    let post = n.int("post_transform", 0)?;
    let Some(n_targets) = n.int_opt("n_targets")? else {
        invalid!("attribute `n_targets` is required");
    };
    if post != 0 {
        unsupported!("post_transform {post} (only NONE)");
    }
    let nn = modes.len();
    if [
        feat.len(),
        true_ids.len(),
        false_ids.len(),
        true_leaf.len(),
        false_leaf.len(),
    ]
    .iter()
    .any(|&l| l != nn)
        || splits.len() < nn && modes.iter().any(|&m| m != 6.0)
        || weights.len() != targets.len()
        || n_targets <= 0
        || targets.iter().any(|&t| t < 0 || t >= n_targets)
        || feat.iter().any(|&f| f < 0 || f as usize >= xs[1])
    {
        invalid!("tree attributes do not agree in length or range");
    }
    // each member node's set: the membership values up to the next NaN, in node order
    let mut sets: Vec<Vec<f64>> = vec![Vec::new(); nn];
    let mut it = members.iter();
    for (i, &m) in modes.iter().enumerate() {
        if m == 6.0 {
            for &v in it.by_ref() {
                if v.is_nan() {
                    break;
                }
                sets[i].push(v);
            }
        }
    }
    // one condition per node, computed once
    let mut cond: Vec<Option<Val>> = vec![None; nn];
    let mut node_cond = |ctx: &mut Ctx, i: usize| -> R<Val> {
        if let Some(c) = &cond[i] {
            return Ok(c.clone());
        }
        let f = feat[i];
        let col = ctx.slice(&x, 1, f, f + 1, 1)?;
        let col = ctx.reshape(&col, &[rows])?;
        let s = ctx.scalar(d, splits.get(i).copied().unwrap_or(0.0));
        let c = match modes[i] as i64 {
            0 => ctx.binary(BinaryOp::Le, &col, &s)?,
            1 => ctx.binary(BinaryOp::Lt, &col, &s)?,
            2 => ctx.binary(BinaryOp::Ge, &col, &s)?,
            3 => ctx.binary(BinaryOp::Gt, &col, &s)?,
            4 => ctx.binary(BinaryOp::Eq, &col, &s)?,
            5 => ctx.binary(BinaryOp::Ne, &col, &s)?,
            6 => {
                let mut acc = ctx.scalar(DType::Bool, 0.0);
                for &v in &sets[i] {
                    let sv = ctx.scalar(d, v);
                    let e = ctx.binary(BinaryOp::Eq, &col, &sv)?;
                    acc = ctx.binary(BinaryOp::Or, &acc, &e)?;
                }
                ctx.expand(&acc, vec![rlx_ir::Dim::Static(rows)])?
            }
            m => invalid!("node mode {m}"),
        };
        let c = if missing
            .as_ref()
            .is_some_and(|m| m.get(i).copied().unwrap_or(0) != 0)
        {
            let nan = ctx.binary(BinaryOp::Ne, &col, &col)?;
            ctx.binary(BinaryOp::Or, &c, &nan)?
        } else {
            c
        };
        cond[i] = Some(c.clone());
        Ok(c)
    };
    // leaves reached: (leaf index, path of (node, branch taken))
    let mut leaves: Vec<(usize, Vec<(usize, bool)>)> = Vec::new();
    for &r in &roots {
        let r = r as usize;
        if r >= nn {
            invalid!("tree root {r} out of range");
        }
        if true_leaf[r] != 0 && false_leaf[r] != 0 && true_ids[r] == false_ids[r] {
            let leaf = true_ids[r] as usize;
            if leaf >= weights.len() {
                invalid!("leaf {leaf} out of range");
            }
            leaves.push((leaf, Vec::new()));
            continue;
        }
        let mut stack = vec![(r, Vec::new())];
        while let Some((node, path)) = stack.pop() {
            if path.len() > 64 || leaves.len() + stack.len() > MAX_PATHS {
                unsupported!("trees deeper than 64 or with more than {MAX_PATHS} leaves");
            }
            for (branch, next, is_leaf) in [
                (true, true_ids[node], true_leaf[node]),
                (false, false_ids[node], false_leaf[node]),
            ] {
                let mut p: Vec<(usize, bool)> = path.clone();
                p.push((node, branch));
                let next = next as usize;
                if is_leaf != 0 {
                    if next >= weights.len() {
                        invalid!("leaf {next} out of range");
                    }
                    leaves.push((next, p));
                } else {
                    if next >= nn {
                        invalid!("node {next} out of range");
                    }
                    stack.push((next, p));
                }
            }
        }
    }
    // each leaf's indicator, as 0/1 in X's dtype: (rows,)
    let mut inds = Vec::with_capacity(leaves.len());
    for (_, path) in &leaves {
        let mut acc: Option<Val> = None;
        for &(node, branch) in path {
            let c = node_cond(ctx, node)?;
            let c = if branch {
                c
            } else {
                ctx.unary(rlx_ir::UnaryOp::Not, &c)?
            };
            acc = Some(match acc {
                None => c,
                Some(a) => ctx.binary(BinaryOp::And, &a, &c)?,
            });
        }
        let ind = match acc {
            Some(a) => ctx.cast(&a, d)?,
            None => {
                let one = ctx.scalar(d, 1.0);
                ctx.expand(&one, vec![rlx_ir::Dim::Static(rows)])?
            }
        };
        inds.push(ctx.reshape(&ind, &[rows, 1])?);
    }
    let nt = n_targets as usize;
    let y = match agg {
        0 | 1 => {
            let ind = ctx.concat(&inds, 1)?; // (rows, leaves)
            let scale = if agg == 0 {
                1.0 / roots.len().max(1) as f64
            } else {
                1.0
            };
            let mut w = vec![0.0; leaves.len() * nt];
            for (j, (leaf, _)) in leaves.iter().enumerate() {
                w[j * nt + targets[*leaf] as usize] += weights[*leaf] * scale;
            }
            let w = ctx.tensor(d, &[leaves.len(), nt], &w)?;
            ctx.matmul(&ind, &w)?
        }
        2 | 3 => {
            let (op, fill) = if agg == 2 {
                (rlx_ir::ReduceOp::Min, f64::MAX)
            } else {
                (rlx_ir::ReduceOp::Max, f64::MIN)
            };
            let fill = if d == DType::F32 {
                fill.signum() * f32::MAX as f64
            } else {
                fill
            };
            let fv = ctx.scalar(d, fill);
            let mut cols = Vec::with_capacity(nt);
            for t in 0..nt {
                let mut vals = vec![fv.clone()];
                for (j, (leaf, _)) in leaves.iter().enumerate() {
                    if targets[*leaf] as usize == t {
                        let on = ctx.binary_scalar(BinaryOp::Gt, &inds[j], 0.5)?;
                        let w = ctx.scalar(d, weights[*leaf]);
                        vals.push(ctx.where_(&on, &w, &fv)?);
                    }
                }
                let vals: Vec<Val> = vals
                    .iter()
                    .map(|v| ctx.expand(v, vec![rlx_ir::Dim::Static(rows), rlx_ir::Dim::Static(1)]))
                    .collect::<R<_>>()?;
                let all = ctx.concat(&vals, 1)?;
                cols.push(ctx.reduce(op, &all, &[1], true)?);
            }
            ctx.concat(&cols, 1)?
        }
        other => invalid!("aggregate_function {other}"),
    };
    Ok(vec![y])
}
