use super::*;
use crate::passes::dce::dce;
use rlx_ir::{Shape, Tensor};

/// Simplifies then drops dead nodes, and returns the non-leaf op names left.
fn check(g: &Graph) -> Vec<&'static str> {
    g.verify().unwrap();
    let s = dce(&simplify(g).unwrap()).unwrap();
    s.verify().unwrap();
    s.nodes()
        .iter()
        .filter(|n| !n.op.is_leaf())
        .map(|n| n.op.name())
        .collect()
}

#[test]
fn multiplicative_identities() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3]);
    let one = g.scalar(DType::F32, 1.0);
    let ones = g.constant(Tensor::full(DType::F32, &[3], 1.0));
    let a = g.mul(x, one).unwrap();
    let b = g.mul(ones, a).unwrap();
    let c = g.div(b, one).unwrap();
    let d = g.binary(BinaryOp::Pow, c, one).unwrap();
    g.output("y", d);
    assert!(check(&g).is_empty());
}

#[test]
fn broadcasting_identity_is_kept() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3]);
    let ones = g.constant(Tensor::full(DType::F32, &[2, 3], 1.0));
    let y = g.mul(x, ones).unwrap();
    g.output("y", y);
    assert_eq!(check(&g), vec!["mul"]);
}

#[test]
fn additive_identities_respect_signed_zero() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4]);
    let pz = g.scalar(DType::F32, 0.0);
    let nz = g.scalar(DType::F32, -0.0);
    let a = g.add(x, nz).unwrap(); // exact: removed
    let b = g.sub(a, pz).unwrap(); // exact: removed
    let c = g.add(b, pz).unwrap(); // -0 + 0 = +0: kept
    let d = g.sub(c, nz).unwrap(); // x - (-0) = x + 0: kept
    g.output("y", d);
    assert_eq!(check(&g), vec!["add", "sub"]);

    let mut g = Graph::new();
    let i = g.input("i", DType::I32, [4]);
    let z = g.scalar(DType::I32, 0.0);
    let a = g.add(z, i).unwrap();
    let b = g.sub(a, z).unwrap();
    g.output("y", b);
    assert!(check(&g).is_empty());
}

#[test]
fn unary_pairs_and_idempotent_ops() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4]);
    let n1 = g.unary(UnaryOp::Neg, x).unwrap();
    let n2 = g.unary(UnaryOp::Neg, n1).unwrap();
    let m = g.binary(BinaryOp::Max, n2, n2).unwrap();
    let a1 = g.unary(UnaryOp::Neg, m).unwrap();
    let a2 = g.unary(UnaryOp::Abs, a1).unwrap();
    let a3 = g.unary(UnaryOp::Abs, a2).unwrap();
    let mone = g.scalar(DType::F32, -1.0);
    let r = g.mul(a3, mone).unwrap();
    let f = g.cast(r, DType::F32).unwrap();
    let b = g.input("b", DType::Bool, [4]);
    let w = g.where_(b, f, f).unwrap();
    g.output("y", w);
    assert_eq!(check(&g), vec!["abs", "neg"]);
}

#[test]
fn layout_chains_compose() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3, 4]);
    let t1 = g.transpose(x, &[1, 2, 0]).unwrap();
    let t2 = g.transpose(t1, &[2, 0, 1]).unwrap(); // composes to identity
    let r1 = g.reshape(t2, [6, 4]).unwrap();
    let r2 = g.reshape(r1, [24]).unwrap();
    let r3 = g.reshape(r2, [24]).unwrap();
    let e = g.push(Op::Expand(Shape::of(&[24])), &[r3], None).unwrap();
    let s = g.slice(e, 0, 0, i64::MAX, 1).unwrap();
    let t3 = g.transpose(x, &[2, 1, 0]).unwrap();
    let t4 = g.transpose(t3, &[0, 2, 1]).unwrap();
    g.output("flat", s);
    g.output("perm", t4);
    assert_eq!(check(&g), vec!["reshape", "transpose"]);
    let simplified = dce(&simplify(&g).unwrap()).unwrap();
    let t = simplified
        .nodes()
        .iter()
        .find(|n| matches!(n.op, Op::Transpose(_)))
        .unwrap();
    assert_eq!(t.op, Op::Transpose(vec![2, 0, 1]));
    assert_eq!(
        simplified.ty(simplified.outputs()[1].1).shape,
        Shape::of(&[4, 2, 3])
    );
}

#[test]
fn partial_slices_stay() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [5]);
    let a = g.slice(x, 0, -1, i64::MIN, -1).unwrap();
    let b = g.slice(x, 0, 1, 5, 1).unwrap();
    g.output("a", a);
    g.output("b", b);
    assert_eq!(check(&g), vec!["slice", "slice"]);
}
