//! The walker against a toy dialect whose spellings show which method made each piece.

use super::*;
use crate::kernel::{Expr, ExprNode, KernelInput, KernelReduce, LoopKernel, View};
use crate::{BinaryOp, DType, ReduceOp, UnaryOp};

/// Spells everything as calls named after the trait method; refuses f64.
struct Toy;

impl Dialect for Toy {
    fn name(&self) -> &'static str {
        "toy kernels"
    }
    fn supports(&self, dtype: DType) -> bool {
        dtype != DType::F64
    }
    fn compute_type(&self, dtype: DType) -> &'static str {
        if dtype.is_float() {
            "real"
        } else {
            "int"
        }
    }
    fn literal(&self, dtype: DType, v: f64) -> String {
        format!("lit<{dtype}>({v})")
    }
    fn load(&self, dtype: DType, stored: &str) -> String {
        format!("load<{dtype}>({stored})")
    }
    fn cast(&self, from: DType, to: DType, a: &str) -> String {
        format!("cast<{from},{to}>({a})")
    }
    fn unary(&self, op: UnaryOp, dtype: DType, a: &str) -> Option<String> {
        op.accepts(dtype).then(|| format!("{}({a})", op.name()))
    }
    fn binary(&self, op: BinaryOp, dtype: DType, a: &str, b: &str) -> Option<String> {
        op.accepts(dtype)
            .then(|| format!("{}({a}, {b})", op.name()))
    }
    fn select(&self, cond: &str, a: &str, b: &str) -> String {
        format!("select({cond}, {a}, {b})")
    }
    fn constant(&self, ty: &str, name: &str, value: &str) -> String {
        format!("let {name}: {ty} = {value};")
    }
    fn variable(&self, ty: &str, name: &str, value: &str) -> String {
        format!("var {name}: {ty} = {value};")
    }
    fn divide_in_place(&self, var: &str, divisor: usize) -> String {
        format!("{var} /= {divisor};")
    }
}

fn node(expr: Expr, dtype: DType) -> ExprNode {
    ExprNode { expr, dtype }
}

fn input(buffer: usize, dtype: DType, strides: Vec<isize>) -> KernelInput {
    KernelInput {
        buffer,
        dtype,
        view: View { offset: 0, strides },
    }
}

/// `where(x > 0, exp(x), cast(y))` over `[2, 3]`, x f32 and y i32.
fn kernel() -> LoopKernel {
    LoopKernel {
        name: "k".into(),
        shape: vec![2, 3],
        reduce_shape: vec![],
        inputs: vec![
            input(0, DType::F32, vec![3, 1]),
            input(1, DType::I32, vec![0, 1]),
        ],
        body: vec![
            node(Expr::Load(0), DType::F32),
            node(Expr::Load(1), DType::I32),
            node(Expr::Const(0.0), DType::F32),
            node(Expr::Binary(BinaryOp::Gt, 0, 2), DType::Bool),
            node(Expr::Unary(UnaryOp::Exp, 0), DType::F32),
            node(Expr::Cast(1), DType::F32),
            node(Expr::Where(3, 4, 5), DType::F32),
        ],
        reduce: None,
        result: 6,
        output: 2,
    }
}

#[test]
fn every_node_is_declared_once_in_body_order_through_the_dialect() {
    let k = kernel();
    let mut elem = |i: usize| match i {
        0 => Operand::Stored("in0[b0]".into()),
        _ => Operand::Value("r1".into()),
    };
    let text = emit_nodes(&Toy, &k, &k.needed(&[k.result]), "e", &mut elem, None).unwrap();
    assert_eq!(
        text,
        "let e0: real = load<f32>(in0[b0]);\n\
         let e1: int = r1;\n\
         let e2: real = lit<f32>(0);\n\
         let e3: int = gt(e0, e2);\n\
         let e4: real = exp(e0);\n\
         let e5: real = cast<i32,f32>(e1);\n\
         let e6: real = select(e3, e4, e5);\n"
    );
}

#[test]
fn only_the_needed_nodes_are_declared() {
    let k = kernel();
    let mut elem = |_: usize| Operand::Value("v".into());
    let text = emit_nodes(&Toy, &k, &k.needed(&[4]), "p", &mut elem, None).unwrap();
    assert_eq!(text, "let p0: real = v;\nlet p4: real = exp(p0);\n");
}

#[test]
fn refusals_name_the_node() {
    let mut k = kernel();
    k.body[4] = node(Expr::Unary(UnaryOp::BitNot, 0), DType::F32);
    let mut elem = |_: usize| Operand::Value("v".into());
    let all = vec![true; k.body.len()];
    let e = emit_nodes(&Toy, &k, &all, "e", &mut elem, None).unwrap_err();
    assert_eq!(
        e,
        format!("e4: {} does not accept f32", UnaryOp::BitNot.name())
    );

    let mut k = kernel();
    k.body[2] = node(Expr::Const(0.0), DType::F64);
    let e = emit_nodes(&Toy, &k, &all, "e", &mut elem, None).unwrap_err();
    assert_eq!(e, "e2: f64 is not supported by toy kernels");

    let mut k = kernel();
    k.body[2] = node(Expr::Reduced, DType::F32);
    let e = emit_nodes(&Toy, &k, &all, "e", &mut elem, None).unwrap_err();
    assert_eq!(e, "e2: reads a reduction outside an epilogue");
    let text = emit_nodes(&Toy, &k, &all, "e", &mut elem, Some("acc")).unwrap();
    assert!(text.contains("let e2: real = acc;\n"), "{text}");
}

#[test]
fn coordinates_split_a_linear_index_row_major() {
    assert_eq!(coords(&Toy, "i", "c", &[], "int"), "");
    assert_eq!(coords(&Toy, "i", "c", &[5], "int"), "let c0: int = i;\n");
    assert_eq!(
        coords(&Toy, "i", "c", &[2, 3, 4], "int"),
        "var c_r: int = i;\n\
         let c2: int = c_r % 4; c_r /= 4;\n\
         let c1: int = c_r % 3; c_r /= 3;\n\
         let c0: int = c_r;\n"
    );
    // the coordinates of every index, evaluated as the text says
    let dims = [2usize, 3, 4];
    let strides = row_major_of(&dims);
    for i in 0..24usize {
        let mut r = i;
        let mut c = [0usize; 3];
        for d in (1..3).rev() {
            c[d] = r % dims[d];
            r /= dims[d];
        }
        c[0] = r;
        let back: usize = c.iter().zip(&strides).map(|(x, s)| x * s).sum();
        assert_eq!(back, i);
    }
}

fn row_major_of(dims: &[usize]) -> Vec<usize> {
    crate::kernel::row_major(dims)
        .into_iter()
        .map(|s| s as usize)
        .collect()
}

#[test]
fn offsets_drop_zero_strides_and_unit_factors() {
    assert_eq!(offset("7", "c", &[0, 1, -2]), "7 + c1 + c2 * -2");
    assert_eq!(offset("0", "c", &[]), "0");
}

#[test]
fn max_offset_is_the_farthest_element() {
    assert_eq!(max_offset(5, &[2, 3], &[3, 1]), 5 + 3 + 2);
    assert_eq!(max_offset(0, &[4, 1], &[-2, 7]), 6);
    assert_eq!(max_offset(1, &[usize::MAX, 2], &[2, 1]), usize::MAX);
}

#[test]
fn broadcast_strides_zero_the_expanded_dims() {
    assert_eq!(broadcast_strides(&[1, 3], &[2, 2, 3]), vec![0, 0, 1]);
    assert_eq!(broadcast_strides(&[2, 3], &[2, 3]), vec![3, 1]);
}

#[test]
fn fusable_epilogues_read_the_library_result_elementwise() {
    let mut k = kernel();
    assert!(k.fusable_epilogue());
    k.inputs[0].view.offset = 3;
    assert!(!k.fusable_epilogue());
    let mut k = kernel();
    k.inputs[0].view.strides = vec![1, 2];
    assert!(!k.fusable_epilogue());
    let mut k = kernel();
    k.reduce_shape = vec![4];
    k.reduce = Some(KernelReduce {
        op: ReduceOp::Sum,
        value: 0,
        dtype: DType::F32,
    });
    assert!(!k.fusable_epilogue());
}

#[test]
fn loop_spaces_merge_output_and_reduction_dims_apart() {
    // out[a, b] = sum over c of x[a, b, c], x contiguous over [2, 3, 4]
    let mut k = kernel();
    k.shape = vec![2, 3];
    k.reduce_shape = vec![4];
    k.inputs = vec![input(0, DType::F32, vec![12, 4, 1])];
    k.body = vec![
        node(Expr::Load(0), DType::F32),
        node(Expr::Reduced, DType::F32),
    ];
    k.reduce = Some(KernelReduce {
        op: ReduceOp::Sum,
        value: 0,
        dtype: DType::F32,
    });
    k.result = 1;
    let (outer, inner) = loop_spaces(&k);
    assert_eq!(outer.dims, vec![6]);
    assert_eq!(outer.strides, vec![vec![4], vec![1]]);
    assert_eq!(inner.dims, vec![4]);
    assert_eq!(inner.strides, vec![vec![1]]);
}

#[test]
fn epilogue_nodes_take_the_library_value_and_read_the_rest_at_their_strides() {
    // out = value + bias[col] over [2, 3]: input 0 the library result, input 1 a row
    let mut k = kernel();
    k.inputs[1] = input(1, DType::F32, vec![0, 1]);
    k.body = vec![
        node(Expr::Load(0), DType::F32),
        node(Expr::Load(1), DType::F32),
        node(Expr::Binary(BinaryOp::Add, 0, 1), DType::F32),
    ];
    k.result = 2;
    assert!(k.fusable_epilogue());
    let space = epilogue_space(&k);
    assert_eq!(space.dims, vec![2, 3]);
    let mut read = |i: usize, strides: &[isize]| {
        Operand::Stored(format!("in{i}[{}]", offset("0", "q", strides)))
    };
    let text = epilogue_nodes(&Toy, &k, &space, "acc", &mut read).unwrap();
    assert_eq!(
        text,
        "let p0: real = acc;\n\
         let p1: real = load<f32>(in1[0 + q1]);\n\
         let p2: real = add(p0, p1);\n"
    );
}
