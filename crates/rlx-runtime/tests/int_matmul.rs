//! `Op::MatMulInteger` compiled for the CPU (integer GEMM, packed weights, fused epilogues)
//! against the interpreter's reference, bit for bit, in every mode; and operands the op
//! does not take rejected with an error naming them.

use rlx_driver::Device;
use rlx_ir::{AInput, BinaryOp, DType, Graph, IntMatMul, Op, SplitMix64, Tensor, TensorData};
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use std::sync::Arc;

fn bytes(dtype: DType, shape: &[usize], rng: &mut SplitMix64) -> Tensor {
    let n: usize = shape.iter().product();
    let raw: Vec<u8> = (0..n).map(|_| (rng.next_u64() >> 31) as u8).collect();
    let data = match dtype {
        DType::U8 => TensorData::U8(raw.into()),
        _ => TensorData::I8(raw.iter().map(|&v| v as i8).collect::<Vec<_>>().into()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

fn f32s(shape: &[usize], rng: &mut SplitMix64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| (rng.next_u64() % 20001) as f32 / 1000.0 - 10.0)
        .collect();
    Tensor::from_f32(shape, v).unwrap()
}

/// One graph: `a [2, m, k]` (u8/i8, or f32 quantized by the op) times a param `b [k, n]`;
/// with `chain`, an i32 result is cast to f32, scaled and offset by a bias (what
/// `quantize_dynamic` writes, fused as the product's epilogue, whose f32 arithmetic may
/// round differently from the interpreter's f64: compared to 1e-6 relative there).
fn check(
    p: IntMatMul,
    a_dtype: DType,
    b_dtype: DType,
    (m, k, n): (usize, usize, usize),
    chain: bool,
) {
    let mut rng = SplitMix64((m * 1000 + k * 10 + n) as u64);
    let mut g = Graph::new();
    let quantized = p.a != AInput::Integer;
    let zero_dtype = if quantized { DType::U8 } else { a_dtype };
    let a_t = if quantized {
        f32s(&[2, m, k], &mut rng)
    } else {
        bytes(a_dtype, &[2, m, k], &mut rng)
    };
    let a = g.input("a", a_t.dtype(), [2, m, k]);
    let b = g.param("b", b_dtype, [k, n]);
    let za = g.constant(bytes(zero_dtype, &[], &mut rng));
    let zb = g.param("zb", b_dtype, [n]);
    let mut ins = vec![a, b];
    if p.a != AInput::Dynamic {
        ins.push(za);
    }
    ins.push(zb);
    if p.a == AInput::Quantize {
        ins.push(g.constant(Tensor::scalar(DType::F32, 0.0917)));
    }
    let scale = g.param("scale", DType::F32, [n]);
    if p.scaled {
        ins.push(scale);
    }
    let y = g.push(Op::MatMulInteger(p), &ins, None).unwrap();
    let y = if p.scaled || p.a == AInput::Dynamic || !chain {
        y
    } else {
        let f = g.push(Op::Cast(DType::F32), &[y], None).unwrap();
        let s = g
            .push(Op::Binary(BinaryOp::Mul), &[f, scale], None)
            .unwrap();
        let bias = g.param("bias", DType::F32, [n]);
        g.push(Op::Binary(BinaryOp::Add), &[s, bias], None).unwrap()
    };
    g.output("y", y);
    let mut params: HashMap<String, Arc<Tensor>> = HashMap::new();
    params.insert("b".into(), Arc::new(bytes(b_dtype, &[k, n], &mut rng)));
    params.insert("zb".into(), Arc::new(bytes(b_dtype, &[n], &mut rng)));
    let sc: Vec<f32> = (0..n).map(|j| 0.01 + j as f32 * 1e-3).collect();
    params.insert(
        "scale".into(),
        Arc::new(Tensor::from_f32(&[n], sc).unwrap()),
    );
    params.insert("bias".into(), Arc::new(f32s(&[n], &mut rng)));
    let inputs: HashMap<String, Tensor> = [("a".to_string(), a_t)].into();
    let want = rlx_cpu::run_graph(&g, &inputs, &params).unwrap();
    let session = Session::new(Device::Cpu).unwrap();
    for (name, t) in &params {
        session.set_param(name, (**t).clone());
    }
    let compiled = session.compile(&g, CompileOptions::default()).unwrap();
    // twice: the weight is packed on one of these runs and reused on the next
    for run in 0..2 {
        let got = compiled.run(&inputs).unwrap();
        let (w, g) = (&want[0].1, &got[0].1);
        assert_eq!(w.shape(), g.shape());
        for i in 0..w.numel() {
            let (wv, gv) = (w.get_f64(i), g.get_f64(i));
            let same = if chain && !p.scaled && p.a != AInput::Dynamic {
                (wv - gv).abs() <= 1e-6 * wv.abs()
            } else {
                wv.to_bits() == gv.to_bits()
            };
            assert!(
                same,
                "{p:?} a {a_dtype} b {b_dtype} {m}x{k}x{n} run {run}: element {i}: {gv} vs {wv}"
            );
        }
    }
}

#[test]
fn compiled_products_equal_the_reference_bit_for_bit() {
    let shapes = [(1, 5, 3), (7, 33, 19), (70, 97, 50)];
    for shape in shapes {
        let modes = [AInput::Integer, AInput::Quantize, AInput::Dynamic];
        for (a_mode, scaled) in modes.into_iter().flat_map(|m| [(m, false), (m, true)]) {
            let p = IntMatMul { a: a_mode, scaled };
            for a in [DType::U8, DType::I8] {
                if a_mode != AInput::Integer && a == DType::I8 {
                    continue;
                }
                for b in [DType::I8, DType::U8] {
                    check(p, a, b, shape, false);
                    if !scaled && a_mode != AInput::Dynamic {
                        check(p, a, b, shape, true);
                    }
                }
            }
        }
    }
}

#[test]
fn wrong_operands_are_errors_that_name_them() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [4, 8]);
    let b = g.param("b", DType::I8, [8, 3]);
    let z = g.constant(Tensor::scalar(DType::U8, 0.0));
    let zb = g.constant(Tensor::scalar(DType::I8, 0.0));
    let err = g
        .push(
            Op::MatMulInteger(IntMatMul::default()),
            &[a, b, z, zb],
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("a must be u8 or i8, got f32"), "{err}");
    let a = g.input("a8", DType::U8, [4, 7]);
    let err = g
        .push(
            Op::MatMulInteger(IntMatMul::default()),
            &[a, b, z, zb],
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("differs from b's rows"), "{err}");
}
