use super::*;
use crate::test_util::{assert_close, run, run_program};
use rlx_ir::kernel::{Expr, View};
use rlx_ir::{BinaryOp, DType, ReduceOp, Shape, Tensor, UnaryOp};

/// Lowers `g`, checks the program against the graph on the interpreter, returns it.
fn check(g: &Graph) -> KernelProgram {
    g.verify().unwrap();
    let p = lower(g).unwrap_or_else(|e| panic!("{e}\n{g}"));
    for seed in [1, 2] {
        assert_close(&run_program(&p, g, seed), &run(g, seed), 1e-6);
    }
    p
}

fn loops(p: &KernelProgram) -> Vec<&LoopKernel> {
    p.kernels
        .iter()
        .filter_map(|k| match k {
            Kernel::Loop(l) => Some(l),
            Kernel::Library(_) => None,
        })
        .collect()
}

#[test]
fn gelu_of_affine_is_one_loop_kernel() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 8]);
    let a = g.param("a", DType::F32, [8]);
    let b = g.param("b", DType::F32, [4, 1]);
    let t = g.mul(x, a).unwrap();
    let t = g.add(t, b).unwrap();
    let y = g.unary(UnaryOp::GELU, t).unwrap();
    g.output("y", y);
    let p = check(&g);
    let s = lower_stats(&p);
    assert_eq!((s.kernels, s.loop_kernels, s.fused_ops), (1, 1, 3), "{p}");
    let k = loops(&p)[0];
    let strides: Vec<&[isize]> = k.inputs.iter().map(|i| &i.view.strides[..]).collect();
    assert_eq!(strides, vec![&[8, 1][..], &[0, 1], &[1, 0]], "{p}");
}

#[test]
fn layer_norm_chain_fuses_prologue_and_epilogue() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3, 16]);
    let gamma = g.param("gamma", DType::F32, [16]);
    let mu = g.reduce(ReduceOp::Mean, x, &[1], true).unwrap();
    let d = g.sub(x, mu).unwrap();
    let d2 = g.mul(d, d).unwrap();
    let var = g.reduce(ReduceOp::Mean, d2, &[1], true).unwrap();
    let eps = g.scalar(DType::F32, 1e-5);
    let v = g.add(var, eps).unwrap();
    let r = g.unary(UnaryOp::Rsqrt, v).unwrap();
    g.set_name(r, "rstd");
    let y = g.mul(d, r).unwrap();
    let y = g.mul(y, gamma).unwrap();
    g.output("y", y);
    let p = check(&g);
    let ks = loops(&p);
    assert_eq!(ks.len(), 3, "{p}");
    let rstd = ks.iter().find(|k| k.name == "rstd").expect("rstd kernel");
    assert_eq!(rstd.reduce_shape, vec![16]);
    // Prologue: (x - mu)^2; epilogue: rsqrt(reduced + eps).
    let mask = rstd.epilogue_mask();
    let ops: Vec<(bool, String)> = rstd
        .body
        .iter()
        .zip(mask)
        .filter_map(|(n, epi)| match &n.expr {
            Expr::Binary(b, ..) => Some((epi, b.name().to_string())),
            Expr::Unary(u, _) => Some((epi, u.name().to_string())),
            _ => None,
        })
        .collect();
    let want = [
        (false, "sub"),
        (false, "mul"),
        (true, "add"),
        (true, "rsqrt"),
    ];
    let want: Vec<(bool, String)> = want.iter().map(|(e, s)| (*e, s.to_string())).collect();
    assert_eq!(ops, want, "{p}");
}

#[test]
fn matmul_bias_relu_is_one_library_kernel_with_epilogue() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 6]);
    let w = g.param("w", DType::F32, [6, 5]);
    let bias = g.param("bias", DType::F32, [5]);
    let m = g.matmul(x, w).unwrap();
    let m = g.add(m, bias).unwrap();
    let y = g.relu(m).unwrap();
    g.output("y", y);
    let p = check(&g);
    assert_eq!(p.kernels.len(), 1, "{p}");
    let Kernel::Library(lib) = &p.kernels[0] else {
        panic!("{p}")
    };
    let epi = lib.epilogue.as_ref().expect("epilogue");
    assert_eq!(lib.op, Op::MatMul);
    assert_eq!(epi.output, lib.output);
    assert_eq!(epi.inputs[0].view.strides, vec![5, 1]);
    assert_eq!(epi.inputs[1].view.strides, vec![0, 1]);
}

#[test]
fn a_bias_read_by_several_head_splits_is_the_matmul_epilogue() {
    // q, k, v split from one projection plus bias (a BERT layer): the add runs once as the
    // matmul's epilogue, and each head split is a plain copy of the biased result
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 4, 12]);
    let w = g.param("w", DType::F32, [12, 24]);
    let bias = g.param("bias", DType::F32, [24]);
    let m = g.matmul(x, w).unwrap();
    let qkv = g.add(m, bias).unwrap();
    let heads: Vec<_> = (0..3)
        .map(|i| {
            let part = g.slice(qkv, 2, 8 * i, 8 * (i + 1), 1).unwrap();
            let split = g.reshape(part, Shape::from([2, 4, 2, 4])).unwrap();
            g.transpose(split, &[0, 2, 1, 3]).unwrap()
        })
        .collect();
    let a = g
        .attention(heads[0], heads[1], heads[2], None, false, None)
        .unwrap();
    g.output("a", a);
    let p = check(&g);
    let libs: Vec<_> = p
        .kernels
        .iter()
        .filter_map(|k| match k {
            Kernel::Library(l) => Some(l),
            Kernel::Loop(_) => None,
        })
        .collect();
    assert!(libs[0].epilogue.is_some(), "{p}");
    let copies = loops(&p);
    assert_eq!(copies.len(), 3, "{p}");
    for c in copies {
        assert_eq!(c.inputs.len(), 1, "a plain copy: {p}");
        assert!(matches!(c.body[..], [_]), "{p}");
    }
    let fused = fused_biases(&g).unwrap();
    let names = (g.node(m).name.clone(), g.node(qkv).name.clone());
    assert_eq!(fused.len(), 1, "{fused:?}");
    assert_eq!((fused[0].library.clone(), fused[0].epilogue.clone()), names);
    assert_eq!(
        fused[0].to_string(),
        format!("bias {} ({})", names.0, names.1)
    );
}

#[test]
fn a_bias_with_one_reader_is_no_fuse_bias_decision() {
    // `x @ w + b` read by one kernel is fused by the ordinary epilogue rule, not `fuse_bias`
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 8]);
    let w = g.param("w", DType::F32, [8, 8]);
    let b = g.param("b", DType::F32, [8]);
    let m = g.matmul(x, w).unwrap();
    let y = g.add(m, b).unwrap();
    let y = g.unary(UnaryOp::Relu, y).unwrap();
    g.output("y", y);
    check(&g);
    assert_eq!(fused_biases(&g).unwrap(), Vec::new());
}

#[test]
fn transposed_operand_is_a_strided_view() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3, 4]);
    let y = g.input("y", DType::F32, [4, 3]);
    let t = g.transpose(x, &[1, 0]).unwrap();
    let s = g.add(t, y).unwrap();
    g.output("s", s);
    let p = check(&g);
    assert_eq!(p.kernels.len(), 1);
    let views: Vec<&View> = loops(&p)[0].inputs.iter().map(|i| &i.view).collect();
    assert_eq!(views[0].strides, vec![1, 4], "{p}");
    assert_eq!(views[1].strides, vec![3, 1], "{p}");
}

#[test]
fn library_operands_are_materialized_and_reshapes_alias() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3, 4]);
    let w = g.param("w", DType::F32, [6, 5]);
    let flat = g.reshape(x, [4, 6]).unwrap(); // alias of x
    let m = g.matmul(flat, w).unwrap();
    let t = g.transpose(m, &[1, 0]).unwrap(); // [5, 4], must be copied for the next matmul
    let v = g.param("v", DType::F32, [4, 2]);
    let n = g.matmul(t, v).unwrap();
    let out = g.reshape(n, [10]).unwrap(); // alias of n's buffer
    g.output("out", out);
    let p = check(&g);
    let s = lower_stats(&p);
    assert_eq!(
        (s.library_kernels, s.loop_kernels, s.aliases),
        (2, 1, 2),
        "{p}"
    );
    let copy = loops(&p)[0];
    assert_eq!(copy.inputs[0].view.strides, vec![1, 5], "{p}");
}

#[test]
fn shared_expensive_node_is_computed_once() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [8]);
    let e = g.unary(UnaryOp::Exp, x).unwrap();
    let a = g.add(e, x).unwrap();
    let b = g.mul(e, x).unwrap();
    let s = g.reduce(ReduceOp::Sum, e, &[0], false).unwrap();
    g.output("a", a);
    g.output("b", b);
    g.output("s", s);
    let p = check(&g);
    let n_exp: usize = loops(&p)
        .iter()
        .flat_map(|k| &k.body)
        .filter(|n| matches!(n.expr, Expr::Unary(UnaryOp::Exp, _)))
        .count();
    assert_eq!(n_exp, 1, "{p}");
}

#[test]
fn slices_expands_and_merging_reshapes() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [6, 5]);
    let s = g.slice(x, 1, -1, i64::MIN, -2).unwrap(); // [6, 3], reversed columns
    let t = g.transpose(s, &[1, 0]).unwrap(); // [3, 6]
    let r = g.reshape(t, [18]).unwrap(); // merges a transposed view: needs a copy
    let e = g.push(Op::Expand(Shape::of(&[2, 18])), &[r], None).unwrap();
    let c = g.constant(Tensor::random(DType::F32, &[2, 1], 9));
    let y = g.binary(BinaryOp::Max, e, c).unwrap();
    g.output("y", y);
    let p = check(&g);
    assert_eq!(lower_stats(&p).loop_kernels, 2, "{p}");
    assert_eq!(loops(&p)[0].inputs[0].view.offset, 4, "{p}");
    assert_eq!(loops(&p)[0].inputs[0].view.strides, vec![-2, 5], "{p}");
}

#[test]
fn symbolic_shapes_are_rejected_by_name() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, Shape(vec!["batch".into(), 4.into()]));
    let y = g.relu(x).unwrap();
    g.output("y", y);
    let err = lower(&g).unwrap_err();
    assert!(err.to_string().contains("`batch`"), "{err}");
    assert!(err.to_string().contains("node `x`"), "{err}");
}

#[test]
fn outputs_that_are_leaves_or_shared() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3]);
    let c = g.constant(Tensor::random(DType::F32, &[3], 4));
    let y = g.add(x, c).unwrap();
    g.output("x_again", x);
    g.output("c", c);
    g.output("y", y);
    g.output("y2", y);
    let p = check(&g);
    assert_eq!(p.kernels.len(), 1);
    assert_eq!(p.outputs[2].1, p.outputs[3].1);
}

#[test]
fn empty_tensors_and_empty_slices() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [0, 3]);
    let r = g.relu(x).unwrap();
    let s = g.reduce(ReduceOp::Sum, r, &[0], false).unwrap();
    let y = g.input("y", DType::F32, [4]);
    let e = g.slice(y, 0, 3, 1, 1).unwrap(); // empty
    let e = g.unary(UnaryOp::Exp, e).unwrap();
    g.output("s", s);
    g.output("r", r);
    g.output("e", e);
    let p = check(&g);
    assert_eq!(lower_stats(&p).loop_kernels, 3, "{p}");
}
