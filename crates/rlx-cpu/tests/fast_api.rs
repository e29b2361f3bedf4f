//! The fast path's API: hand-computed values, concurrent runs, memory planning, profiling
//! and errors.

use rlx_cpu::testing::{contiguous_view, random_bindings, rel_l2, ProgramBuilder};
use rlx_cpu::{run_program_reference, CpuError, CpuOptions, CpuProgram};
use rlx_ir::kernel::{Expr, ExprNode, KernelInput, LoopKernel, View};
use rlx_ir::{BinaryOp, DType, Op, Tensor, TensorData, UnaryOp};
use std::collections::HashMap;
use std::sync::Arc;

const F: DType = DType::F32;

fn unary_kernel(name: &str, shape: &[usize], src: usize, op: UnaryOp) -> LoopKernel {
    LoopKernel {
        name: name.into(),
        shape: shape.to_vec(),
        reduce_shape: vec![],
        inputs: vec![KernelInput {
            buffer: src,
            dtype: F,
            view: contiguous_view(shape),
        }],
        body: vec![
            ExprNode {
                expr: Expr::Load(0),
                dtype: F,
            },
            ExprNode {
                expr: Expr::Unary(op, 0),
                dtype: F,
            },
        ],
        reduce: None,
        result: 1,
        output: 0,
    }
}

fn matmul_program() -> rlx_ir::kernel::KernelProgram {
    let mut b = ProgramBuilder::new();
    let a = b.input("a", F, &[2, 3]);
    let w = b.param("w", F, &[3, 2]);
    let y = b.push_library("mm", Op::MatMul, &[a, w], None).unwrap();
    b.output("y", y);
    b.finish()
}

fn bindings() -> (HashMap<String, Tensor>, HashMap<String, Arc<Tensor>>) {
    let mut inputs = HashMap::new();
    inputs.insert(
        "a".to_string(),
        Tensor::from_f32(&[2, 3], vec![1., 2., 3., 4., 5., 6.]).unwrap(),
    );
    let mut params = HashMap::new();
    params.insert(
        "w".to_string(),
        Arc::new(Tensor::from_f32(&[3, 2], vec![7., 8., 9., 10., 11., 12.]).unwrap()),
    );
    (inputs, params)
}

#[test]
fn matmul_hand_values() {
    let p = CpuProgram::compile(matmul_program(), &CpuOptions::default()).unwrap();
    let (inputs, params) = bindings();
    let out = p.run(&inputs, &params).unwrap();
    assert_eq!(out[0].0, "y");
    assert_eq!(out[0].1.as_f32().unwrap(), &[58., 64., 139., 154.]);
    assert!(p.interpreted_kernels().is_empty());
}

#[test]
fn one_program_from_four_threads() {
    let mut b = ProgramBuilder::new();
    let x = b.input("x", F, &[64, 200]);
    let w = b.param("w", F, &[200, 96]);
    let h = b.push_library("mm", Op::MatMul, &[x, w], None).unwrap();
    let k = unary_kernel("gelu", &[64, 96], h, UnaryOp::GELU);
    let y = b.push_loop(k);
    let s = b
        .push_library("softmax", Op::Softmax { axis: 1 }, &[y], None)
        .unwrap();
    b.output("s", s);
    let prog = b.finish();
    let p = Arc::new(
        CpuProgram::compile(
            prog.clone(),
            &CpuOptions {
                threads: Some(2),
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let p = p.clone();
            let prog = prog.clone();
            std::thread::spawn(move || {
                for i in 0..5 {
                    let (inputs, params) = random_bindings(&prog, t * 100 + i);
                    let want = run_program_reference(&prog, &inputs, &params).unwrap();
                    let got = p.run(&inputs, &params).unwrap();
                    assert!(rel_l2(&got[0].1, &want[0].1) <= 1e-5);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn arena_reuses_memory_and_outputs_are_not_in_it() {
    let mut b = ProgramBuilder::new();
    let x = b.input("x", F, &[1000]);
    let mut cur = x;
    for i in 0..6 {
        cur = b.push_loop(unary_kernel(&format!("k{i}"), &[1000], cur, UnaryOp::Tanh));
    }
    b.output("y", cur);
    let p = CpuProgram::compile(b.finish(), &CpuOptions::default()).unwrap();
    // five temps of 4000 bytes, at most two live at once
    assert_eq!(p.arena_bytes(), 2 * 4032);
    let (inputs, params) = random_bindings(p.program(), 1);
    let rlx_cpu::ProfiledRun {
        outputs: out,
        timings,
    } = p.run_profiled(&inputs, &params).unwrap();
    assert_eq!(timings.len(), 6);
    assert_eq!(timings[0].kind, "loop");
    let want = run_program_reference(p.program(), &inputs, &params).unwrap();
    assert!(rel_l2(&out[0].1, &want[0].1) <= 1e-5);
}

#[test]
fn outputs_may_be_inputs_constants_and_aliases() {
    let mut b = ProgramBuilder::new();
    let x = b.input("x", F, &[2, 3]);
    let c = b.constant(Tensor::from_f32(&[2], vec![1., 2.]).unwrap());
    let y = b.push_loop(unary_kernel("neg", &[2, 3], x, UnaryOp::Neg));
    let flat = b.alias(y, &[6]);
    let unused = b.temp(DType::I8, &[5]);
    b.alias(unused, &[5, 1]);
    b.output("x", x);
    b.output("c", c);
    b.output("y", y);
    b.output("flat", flat);
    let p = CpuProgram::compile(b.finish(), &CpuOptions::default()).unwrap();
    let (inputs, params) = random_bindings(p.program(), 3);
    let out = p.run(&inputs, &params).unwrap();
    assert_eq!(&out[0].1, &inputs["x"]);
    assert_eq!(out[1].1.as_f32().unwrap(), &[1., 2.]);
    assert_eq!(out[3].1.shape(), &[6]);
    assert_eq!(out[2].1.as_f32().unwrap(), out[3].1.as_f32().unwrap());
}

#[test]
fn bad_bindings_are_named_errors() {
    let p = CpuProgram::compile(matmul_program(), &CpuOptions::default()).unwrap();
    let (mut inputs, mut params) = bindings();
    params.clear();
    assert_eq!(
        p.run(&inputs, &params).unwrap_err().to_string(),
        "missing param `w`"
    );
    let (_, good) = bindings();
    inputs.insert("a".into(), Tensor::full(DType::F64, &[2, 3], 1.0));
    let e = p.run(&inputs, &good).unwrap_err();
    assert_eq!(e.to_string(), "input `a`: expected f32[2,3], got f64[2,3]");
    inputs.clear();
    let e = run_program_reference(p.program(), &inputs, &good).unwrap_err();
    assert_eq!(
        CpuError::from(e),
        CpuError::Missing {
            kind: "input",
            name: "a".into()
        }
    );
}

#[test]
fn gather_out_of_range_is_an_error_on_both_paths() {
    let mut b = ProgramBuilder::new();
    let table = b.param("table", F, &[4, 3]);
    let ids = b.input("ids", DType::I64, &[2]);
    let y = b
        .push_library("embed", Op::Gather { axis: 0 }, &[table, ids], None)
        .unwrap();
    b.output("y", y);
    let prog = b.finish();
    let p = CpuProgram::compile(prog.clone(), &CpuOptions::default()).unwrap();
    let (mut inputs, params) = random_bindings(&prog, 1);
    inputs.insert(
        "ids".into(),
        Tensor::new(vec![2], TensorData::I64(vec![1, -5].into())).unwrap(),
    );
    let e = p.run(&inputs, &params).unwrap_err().to_string();
    assert_eq!(
        e,
        "kernel `embed`: gather: index -5 out of range for axis 0 of size 4"
    );
    let e = run_program_reference(&prog, &inputs, &params)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "kernel `embed`: gather: index -5 out of range for axis 0 of size 4"
    );
    // a good index after a failed run: the arena went back to the pool
    inputs.insert(
        "ids".into(),
        Tensor::new(vec![2], TensorData::I64(vec![1, -4].into())).unwrap(),
    );
    assert!(p.run(&inputs, &params).is_ok());
}

#[test]
fn malformed_programs_are_rejected_at_compile() {
    // a view reading past its buffer
    let mut b = ProgramBuilder::new();
    let x = b.input("x", F, &[4]);
    let mut k = unary_kernel("oob", &[4], x, UnaryOp::Neg);
    k.inputs[0].view = View {
        offset: 1,
        strides: vec![1],
    };
    let y = b.push_loop(k);
    b.output("y", y);
    let e = CpuProgram::compile(b.finish(), &CpuOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("kernel `oob` input 0") && e.contains("buffer of 4"),
        "{e}"
    );
    // a temp read before any kernel writes it
    let mut b = ProgramBuilder::new();
    let t = b.temp(F, &[4]);
    let y = b.push_loop(unary_kernel("early", &[4], t, UnaryOp::Neg));
    b.output("y", y);
    let e = CpuProgram::compile(b.finish(), &CpuOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        e,
        "kernel `early` reads temp b0 before any kernel writes it"
    );
    // an op whose operands do not fit
    let mut b = ProgramBuilder::new();
    let x = b.input("x", F, &[4, 3]);
    let out = b.temp(F, &[4, 4]);
    b.program.kernels.push(rlx_ir::kernel::Kernel::Library(
        rlx_ir::kernel::LibraryKernel {
            name: "mm".into(),
            op: Op::MatMul,
            inputs: vec![x, x],
            output: out,
            epilogue: None,
        },
    ));
    let e = CpuProgram::compile(b.finish(), &CpuOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.starts_with("kernel `mm`: matmul: inner dims differ"),
        "{e}"
    );
    // writing an input
    let mut b = ProgramBuilder::new();
    let x = b.input("x", F, &[4]);
    let mut k = unary_kernel("w", &[4], x, UnaryOp::Neg);
    k.output = x;
    b.program.kernels.push(rlx_ir::kernel::Kernel::Loop(k));
    let e = CpuProgram::compile(b.finish(), &CpuOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert_eq!(e, "kernel `w` writes b0, which is not a temp buffer");
}

#[test]
fn device_info() {
    assert!(rlx_cpu::thread_count() >= 1);
    assert!(!rlx_cpu::cpu_name().is_empty());
    let _ = BinaryOp::Add;
}

#[test]
fn program_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<CpuProgram>();
}

#[test]
fn outputs_past_the_caches_stream_and_stay_exact() {
    // 16M + 13 points: written with non-temporal stores, an unaligned tail included; the
    // temp of the first kernel is read back by the second from the arena.
    let n = (16 << 20) + 13;
    let mut b = ProgramBuilder::new();
    let x = b.input("x", F, &[n]);
    let t = b.push_loop(unary_kernel("tanh", &[n], x, UnaryOp::Tanh));
    let y = b.push_loop(unary_kernel("neg", &[n], t, UnaryOp::Neg));
    b.output("y", y);
    let p = CpuProgram::compile(
        b.finish(),
        &CpuOptions {
            threads: Some(2),
            ..Default::default()
        },
    )
    .unwrap();
    let data: Vec<f32> = (0..n)
        .map(|i| ((i % 1000) as f32 - 500.0) / 250.0)
        .collect();
    let inputs = HashMap::from([(
        "x".to_string(),
        Tensor::new(vec![n], TensorData::F32(data.clone().into())).unwrap(),
    )]);
    let out = p.run(&inputs, &HashMap::new()).unwrap();
    let y = out[0].1.as_f32().unwrap();
    for i in (0..n).step_by(997).chain(n - 20..n) {
        let want = -(data[i] as f64).tanh();
        assert!(
            (y[i] as f64 - want).abs() < 1e-6,
            "point {i}: {} vs {want}",
            y[i]
        );
    }
}

#[test]
fn shared_param_is_read_in_place() {
    let p = CpuProgram::compile(matmul_program(), &CpuOptions::default()).unwrap();
    let (inputs, _) = bindings();
    let owner: Arc<Vec<f32>> = Arc::new(vec![7., 8., 9., 10., 11., 12.]);
    // SAFETY: `owner` keeps the elements alive and nothing writes them.
    let buf = unsafe { rlx_ir::Buffer::shared(owner.clone(), owner.as_ptr(), owner.len()) };
    let w = Arc::new(Tensor::new(vec![3, 2], TensorData::F32(buf)).unwrap());
    let params = HashMap::from([("w".to_string(), w.clone())]);
    let out = p.run(&inputs, &params).unwrap();
    assert_eq!(out[0].1.as_f32().unwrap(), &[58., 64., 139., 154.]);
    assert!(w.is_shared());
    assert_eq!(w.as_f32().unwrap().as_ptr(), owner.as_ptr());
    // the owner, the tensor's buffer; the run kept no copy or clone of it
    assert_eq!(Arc::strong_count(&owner), 2);
}

/// A weight runs unpacked on its first binding, packed from the second run with the same
/// tensor on, and unpacked again when another tensor is bound; f16 weights follow the same
/// rule. Every run must match the reference.
#[test]
fn rebinding_a_weight_repacks_it() {
    for dtype in [F, DType::F16] {
        let mut b = ProgramBuilder::new();
        let x = b.input("x", dtype, &[3, 10, 40]);
        let w = b.param("w", dtype, &[40, 33]);
        let y = b.push_library("mm", Op::MatMul, &[x, w], None).unwrap();
        b.output("y", y);
        let prog = b.finish();
        let p = CpuProgram::compile(
            prog.clone(),
            &CpuOptions {
                threads: Some(2),
                ..Default::default()
            },
        )
        .unwrap();
        let inputs = HashMap::from([("x".to_string(), Tensor::random(dtype, &[3, 10, 40], 1))]);
        for seed in [2, 3, 2] {
            let params = HashMap::from([(
                "w".to_string(),
                Arc::new(Tensor::random(dtype, &[40, 33], seed)),
            )]);
            for _ in 0..2 {
                let got = p.run(&inputs, &params).unwrap().remove(0).1;
                let want = run_program_reference(&prog, &inputs, &params)
                    .unwrap()
                    .remove(0)
                    .1;
                let err = rel_l2(&got, &want);
                let bound = if dtype == F { 1e-5 } else { 2e-3 };
                assert!(err <= bound, "{dtype:?} weight seed {seed}: rel L2 {err}");
            }
        }
    }
}
