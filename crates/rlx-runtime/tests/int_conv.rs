//! `Op::ConvInteger` compiled for the CPU (im2col patches on the integer GEMM, weights
//! packed once, requantization in the same pass) against the interpreter's reference, bit
//! for bit: u8 and i8 inputs and weights, groups, strides, pads, dilations, per-tensor and
//! per-channel weight zero points, with and without requantization and bias; and operands
//! the op does not take rejected with an error naming them.

use rlx_driver::Device;
use rlx_ir::{Conv2dParams, DType, Graph, IntConv, Op, SplitMix64, Tensor, TensorData};
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

/// One case of the sweep.
#[derive(Debug, Clone, Copy)]
struct Case {
    x: DType,
    w: DType,
    conv: Conv2dParams,
    /// input channels, output channels, kernel h and w
    dims: (usize, usize, usize, usize),
    per_channel: bool,
    requantize: Option<DType>,
    bias: bool,
    /// the weight a constant (packed at compile time) rather than a param
    constant: bool,
}

fn check(case: Case, seed: u64) {
    let mut rng = SplitMix64(seed);
    let (c, m, kh, kw) = case.dims;
    let shape_x = [2, c, 9, 8];
    let shape_w = [m, c / case.conv.groups, kh, kw];
    let mut g = Graph::new();
    let x = g.input("x", case.x, shape_x);
    let w_t = bytes(case.w, &shape_w, &mut rng);
    let w = if case.constant {
        g.constant(w_t.clone())
    } else {
        g.param("w", case.w, shape_w)
    };
    let xz = g.constant(bytes(case.x, &[], &mut rng));
    let wz = if case.per_channel {
        g.constant(bytes(case.w, &[m], &mut rng))
    } else {
        g.constant(bytes(case.w, &[1], &mut rng))
    };
    let mut ins = vec![x, w, xz, wz];
    if let Some(to) = case.requantize {
        let mul: Vec<f32> = (0..m)
            .map(|_| 1e-4 + (rng.next_u64() % 1000) as f32 * 2e-6)
            .collect();
        ins.push(g.constant(Tensor::from_f32(&[m], mul).unwrap()));
        ins.push(g.constant(bytes(to, &[], &mut rng)));
        if case.bias {
            let b: Vec<i32> = (0..m)
                .map(|_| (rng.next_u64() % 20001) as i32 - 10000)
                .collect();
            ins.push(g.constant(Tensor::new(vec![m], TensorData::I32(b.into())).unwrap()));
        }
    }
    let p = IntConv {
        conv: case.conv,
        requantize: case.requantize.is_some(),
    };
    let y = g.push(Op::ConvInteger(p), &ins, None).unwrap();
    g.output("y", y);
    let params: HashMap<String, Arc<Tensor>> = [("w".to_string(), Arc::new(w_t))].into();
    let inputs: HashMap<String, Tensor> =
        [("x".to_string(), bytes(case.x, &shape_x, &mut rng))].into();
    let want = rlx_cpu::run_graph(&g, &inputs, &params).unwrap();
    let session = Session::new(Device::Cpu).unwrap();
    for (name, t) in &params {
        session.set_param(name, (**t).clone());
    }
    let compiled = session.compile(&g, CompileOptions::default()).unwrap();
    // twice: the weight is packed on the first run (or at compile) and reused
    for run in 0..2 {
        let got = compiled.run(&inputs).unwrap();
        let (w, g) = (&want[0].1, &got[0].1);
        assert_eq!(w.shape(), g.shape());
        assert_eq!(w.dtype(), g.dtype());
        let values = w.to_f64_vec();
        assert_eq!(values, g.to_f64_vec(), "{case:?} run {run}");
        if case.requantize.is_some() {
            // the random scales keep most values off the saturation bounds
            let distinct: std::collections::HashSet<i64> =
                values.iter().map(|&v| v as i64).collect();
            assert!(distinct.len() > 20, "{case:?}: {} values", distinct.len());
        }
    }
}

#[test]
fn compiled_convolutions_equal_the_reference_bit_for_bit() {
    let plain = Conv2dParams::default();
    let window = Conv2dParams {
        stride: [2, 1],
        pads: [1, 2, 0, 1],
        dilation: [1, 2],
        groups: 1,
    };
    let grouped = Conv2dParams {
        stride: [1, 2],
        pads: [1, 1, 1, 1],
        dilation: [2, 1],
        groups: 3,
    };
    let depthwise = Conv2dParams {
        pads: [1, 1, 1, 1],
        groups: 6,
        ..plain
    };
    let windows = [
        (plain, (5, 7, 1, 1)),
        (window, (5, 17, 3, 3)),
        (grouped, (6, 9, 3, 2)),
        (depthwise, (6, 6, 3, 3)),
    ];
    let mut seed = 1;
    for (conv, dims) in windows {
        for (x, w) in [
            (DType::U8, DType::I8),
            (DType::U8, DType::U8),
            (DType::I8, DType::I8),
            (DType::I8, DType::U8),
        ] {
            for (per_channel, requantize, bias, constant) in [
                (false, None, false, false),
                (true, None, false, true),
                (false, Some(DType::U8), true, true),
                (true, Some(DType::I8), false, false),
                (true, Some(DType::U8), true, false),
            ] {
                seed += 1;
                let case = Case {
                    x,
                    w,
                    conv,
                    dims,
                    per_channel,
                    requantize,
                    bias,
                    constant,
                };
                check(case, seed);
            }
        }
    }
}

#[test]
fn wrong_operands_are_errors_that_name_them() {
    let mut g = Graph::new();
    let x = g.input("x", DType::U8, [1, 4, 6, 6]);
    let w = g.param("w", DType::I8, [8, 4, 3, 3]);
    let xz = g.constant(Tensor::scalar(DType::U8, 3.0));
    let wz = g.constant(Tensor::scalar(DType::I8, 0.0));
    let p = IntConv::default();
    let mut err = |ins: &[rlx_ir::NodeId], q: IntConv| {
        g.push(Op::ConvInteger(q), ins, None)
            .unwrap_err()
            .to_string()
    };
    let xf = {
        let e = err(&[x, w, wz, wz], p);
        assert!(e.contains("x_zero must be u8 as x is, got i8"), "{e}");
        e
    };
    assert!(xf.contains("conv_integer"), "{xf}");
    let e = err(&[x, w, xz], p);
    assert!(e.contains("expects 4 inputs"), "{e}");
    let q = IntConv {
        requantize: true,
        ..p
    };
    let e = err(&[x, w, xz, wz, xz, xz], q);
    assert!(e.contains("multiplier must be f32"), "{e}");
}
