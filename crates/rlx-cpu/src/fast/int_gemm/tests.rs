//! Every instruction set against the reference (`rlx_ir::IntMatMul::reference`), bit for
//! bit, on random operands of odd sizes.

use super::pack::{ASource, PackedA, PackedB};
use super::*;
use rlx_ir::{AInput, DType, IntMatMul, SplitMix64, Tensor, TensorData};

fn bytes(n: usize, rng: &mut SplitMix64) -> Vec<u8> {
    (0..n).map(|_| (rng.next_u64() >> 29) as u8).collect()
}

fn tensor(dtype: DType, shape: &[usize], raw: &[u8]) -> Tensor {
    let data = match dtype {
        DType::U8 => TensorData::U8(raw.to_vec().into()),
        _ => TensorData::I8(raw.iter().map(|&v| v as i8).collect::<Vec<_>>().into()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

/// A case: activation kind (u8, i8, f32 into u8, f32 into i8), weight signedness, zero
/// points non-zero or not, scaled or not.
#[derive(Debug, Clone, Copy)]
struct Case {
    a: DType,
    quantize_to: DType,
    b_signed: bool,
    zeros: bool,
    scaled: bool,
}

fn check(case: Case, m: usize, k: usize, n: usize, seed: u64) {
    let mut rng = SplitMix64(seed);
    let b_dtype = if case.b_signed { DType::I8 } else { DType::U8 };
    let b_raw = bytes(k * n, &mut rng);
    let b = tensor(b_dtype, &[k, n], &b_raw);
    let zero_dtype = if case.a == DType::F32 {
        case.quantize_to
    } else {
        case.a
    };
    let za_raw = [if case.zeros {
        (rng.next_u64() >> 40) as u8
    } else {
        0
    }];
    let a_zero = tensor(zero_dtype, &[], &za_raw);
    let zb_raw: Vec<u8> = if case.zeros && seed.is_multiple_of(2) {
        bytes(n, &mut rng)
    } else {
        vec![if case.zeros { 3 } else { 0 }]
    };
    let zb_shape: &[usize] = if zb_raw.len() == 1 { &[] } else { &[n] };
    let b_zero = tensor(b_dtype, zb_shape, &zb_raw);
    let x: Vec<f32> = (0..m * k)
        .map(|_| ((rng.next_u64() % 20001) as f32 / 1000.0 - 10.0) * 1.7)
        .collect();
    let a_raw = bytes(m * k, &mut rng);
    let a = match case.a {
        DType::F32 => Tensor::new(vec![m, k], TensorData::F32(x.clone().into())).unwrap(),
        d => tensor(d, &[m, k], &a_raw),
    };
    let a_scale_v = 0.0731f32;
    let scale_v: Vec<f32> = (0..n).map(|j| 0.001 * (j as f32 + 0.5)).collect();
    let p = IntMatMul {
        a: if case.a == DType::F32 {
            AInput::Quantize
        } else {
            AInput::Integer
        },
        scaled: case.scaled,
    };
    let a_scale = Tensor::new(vec![], TensorData::F32(vec![a_scale_v].into())).unwrap();
    let scale = Tensor::new(vec![n], TensorData::F32(scale_v.clone().into())).unwrap();
    let mut ins = vec![&a, &b, &a_zero, &b_zero];
    if p.a == AInput::Quantize {
        ins.push(&a_scale);
    }
    if p.scaled {
        ins.push(&scale);
    }
    let tys: Vec<_> = ins
        .iter()
        .map(|t| rlx_ir::TensorType::new(t.dtype(), rlx_ir::Shape::of(t.shape())))
        .collect();
    p.infer(&tys.iter().collect::<Vec<_>>()).unwrap();
    let want = p.reference(&ins);

    let signed_za = |v: u8| {
        if zero_dtype == DType::I8 {
            i32::from(v as i8)
        } else {
            i32::from(v)
        }
    };
    let src = match case.a {
        DType::U8 => ASource::U8(&a_raw, signed_za(za_raw[0])),
        DType::I8 => ASource::I8(bytemuck_i8(&a_raw), signed_za(za_raw[0])),
        _ => ASource::F32 {
            x: &x,
            scale: a_scale_v,
            zero: signed_za(za_raw[0]),
            signed: case.quantize_to == DType::I8,
        },
    };
    let mut pa = PackedA::default();
    pa.fill(src, m, k, 2);
    let pb = PackedB::pack(&b_raw, k, n, case.b_signed);
    let zb: Vec<i32> = zb_raw
        .iter()
        .map(|&v| {
            if case.b_signed {
                i32::from(v as i8)
            } else {
                i32::from(v)
            }
        })
        .collect();
    for isa in Isa::all() {
        for threads in [1, 2] {
            let what = format!("{case:?} {m}x{k}x{n} {isa:?} threads={threads}");
            if case.scaled {
                let mut got = vec![f32::NAN; m * n];
                gemm(isa, &pa, &pb, &zb, Out::F32(&mut got, &scale_v), threads);
                let TensorData::F32(w) = &want else {
                    panic!("f32 reference")
                };
                for (g, w) in got.iter().zip(w.iter()) {
                    assert_eq!(g.to_bits(), w.to_bits(), "{what}: {g} vs {w}");
                }
            } else {
                let mut got = vec![i32::MIN; m * n];
                gemm(isa, &pa, &pb, &zb, Out::I32(&mut got), threads);
                let TensorData::I32(w) = &want else {
                    panic!("i32 reference")
                };
                assert_eq!(&got[..], &w[..], "{what}");
            }
        }
    }
}

fn bytemuck_i8(v: &[u8]) -> &[i8] {
    // SAFETY: u8 and i8 have the same size and alignment, and every bit pattern is valid.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len()) }
}

#[test]
fn every_isa_equals_the_reference_bit_for_bit() {
    let shapes = [
        (1, 1, 1),
        (3, 5, 7),
        (9, 33, 17),
        (13, 31, 40),
        (67, 100, 50),
        (130, 97, 33),
    ];
    let mut seed = 1;
    for (m, k, n) in shapes {
        for a in [DType::U8, DType::I8, DType::F32] {
            for quantize_to in [DType::U8, DType::I8] {
                if a != DType::F32 && quantize_to == DType::I8 {
                    continue;
                }
                for b_signed in [true, false] {
                    for zeros in [false, true] {
                        for scaled in [false, true] {
                            let case = Case {
                                a,
                                quantize_to,
                                b_signed,
                                zeros,
                                scaled,
                            };
                            check(case, m, k, n, seed);
                            seed += 1;
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn extreme_values_do_not_saturate() {
    // 255 * 127 pairs overflow i16: the AVX2 tile must not use saturating pair sums
    let (m, k, n) = (5, 64, 20);
    let a = vec![255u8; m * k];
    let b = vec![127u8; k * n];
    let mut pa = PackedA::default();
    pa.fill(ASource::U8(&a, 0), m, k, 1);
    let pb = PackedB::pack(&b, k, n, true);
    for isa in Isa::all() {
        let mut got = vec![0i32; m * n];
        gemm(isa, &pa, &pb, &[0], Out::I32(&mut got), 1);
        assert!(got.iter().all(|&v| v == 255 * 127 * 64), "{isa:?}");
    }
}
