//! Emitted CUDA C for fused loop kernels: text checks, and NVRTC compile checks of every
//! generated kernel (no GPU needed; skipped with a reason when NVRTC is absent).

mod support;

use rlx_cuda::codegen::{loops, EmittedKernel, Target};
use rlx_ir::kernel::Expr;
use rlx_ir::{BinaryOp, DType, ReduceOp, UnaryOp};
use support::*;

fn emit(k: &rlx_ir::kernel::LoopKernel) -> EmittedKernel {
    loops::emit(k, &Target::h200(), true, false).unwrap_or_else(|e| panic!("{e}\n{k}"))
}

/// out = relu(x + bias) with bias broadcast along rows: merged to two dims.
fn bias_relu(dtype: DType) -> rlx_ir::kernel::LoopKernel {
    kernel(
        "bias_relu",
        &[4, 3, 8],
        &[],
        vec![
            input(0, dtype, strides(&[4, 3, 8])),
            input(1, dtype, vec![0, 0, 1]),
        ],
        vec![
            node(Expr::Load(0), dtype),
            node(Expr::Load(1), dtype),
            node(Expr::Binary(BinaryOp::Add, 0, 1), dtype),
            node(Expr::Unary(UnaryOp::Relu, 2), dtype),
        ],
        None,
        2,
    )
}

#[test]
fn elementwise_text_merges_dims_and_uses_literals() {
    let k = emit(&bias_relu(DType::F32));
    assert!(k.source.contains("idx < 96"), "{}", k.source);
    assert!(k.source.contains("const int o1 = o_r % 8;"), "{}", k.source);
    assert!(k.source.contains("in1[b1]"), "{}", k.source);
    assert!(k.source.contains("const int b1 = 0 + o1;"), "{}", k.source);
    assert_eq!(k.args.len(), 3);
    // Same text, same function: layers repeated share one compile.
    assert_eq!(emit(&bias_relu(DType::F32)).function, k.function);
}

#[test]
fn half_types_convert_at_loads_and_stores() {
    let k = emit(&bias_relu(DType::F16));
    assert!(k.source.contains("rlx_f16_to_f32(in0[b0])"), "{}", k.source);
    assert!(
        k.source.contains("out[idx] = rlx_f32_to_f16(e3)"),
        "{}",
        k.source
    );
}

#[test]
fn elementwise_kernels_compile_for_every_dtype() {
    let mut ks = Vec::new();
    for dt in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::I8,
        DType::U8,
    ] {
        ks.push(emit(&bias_relu(dt)));
    }
    compile_check("elementwise_kernels_compile_for_every_dtype", &ks);
}

/// One kernel applying every unary and binary op the dtype accepts (composites only where
/// CUDA has a native form; legalization expands the others).
fn all_ops(dtype: DType) -> rlx_ir::kernel::LoopKernel {
    let mut body = vec![node(Expr::Load(0), dtype), node(Expr::Load(1), dtype)];
    let mut acc = 0;
    let native = |u: &UnaryOp| rlx_cuda::codegen::unary::unary(*u, dtype, "x").is_some();
    for op in UnaryOp::ALL.into_iter().filter(native) {
        body.push(node(Expr::Unary(op, acc), dtype));
        acc = body.len() - 1;
    }
    for op in BinaryOp::ALL.into_iter().filter(|b| b.accepts(dtype)) {
        let out = op.result_dtype(dtype);
        body.push(node(Expr::Binary(op, acc, 1), out));
        let r = body.len() - 1;
        let back = if out == dtype {
            r
        } else {
            body.push(node(Expr::Where(r, acc, 1), dtype));
            body.len() - 1
        };
        acc = back;
    }
    for to in DType::ALL {
        body.push(node(Expr::Cast(acc), to));
        let c = body.len() - 1;
        body.push(node(Expr::Cast(c), dtype));
        acc = body.len() - 1;
    }
    kernel(
        &format!("all_ops_{dtype}"),
        &[5, 7],
        &[],
        vec![input(0, dtype, vec![7, 1]), input(1, dtype, vec![1, 5])],
        body,
        None,
        2,
    )
}

#[test]
fn every_scalar_rule_compiles_for_every_dtype() {
    let ks: Vec<EmittedKernel> = DType::ALL.into_iter().map(|d| emit(&all_ops(d))).collect();
    compile_check("every_scalar_rule_compiles_for_every_dtype", &ks);
}

/// out[i] = sqrt(mean(x[i, :]^2) + 1e-5) over rows of `len`, an rms-like reduction with
/// prologue and epilogue.
fn rms_rows(rows: usize, len: usize, op: ReduceOp, dtype: DType) -> rlx_ir::kernel::LoopKernel {
    let acc = if dtype.is_float() {
        DType::F32.max(dtype)
    } else {
        dtype
    };
    let acc = if matches!(dtype, DType::F16 | DType::BF16) {
        DType::F32
    } else {
        acc
    };
    let mut body = vec![node(Expr::Load(0), dtype)];
    body.push(node(Expr::Cast(0), acc));
    body.push(node(Expr::Binary(BinaryOp::Mul, 1, 1), acc));
    body.push(node(Expr::Reduced, acc));
    body.push(node(Expr::Load(1), dtype));
    body.push(node(Expr::Cast(4), acc));
    body.push(node(Expr::Binary(BinaryOp::Add, 3, 5), acc));
    body.push(node(Expr::Cast(6), dtype));
    kernel(
        "rms_rows",
        &[rows],
        &[len],
        vec![
            input(0, dtype, vec![len as isize, 1]),
            input(1, dtype, vec![0, 0]),
        ],
        body,
        Some((op, 2, acc)),
        2,
    )
}

#[test]
fn reductions_pick_thread_warp_or_block_per_row() {
    let t = Target::h200();
    assert_eq!(loops::reduce_shape(1000, 8, &t), loops::ReduceShape::Thread);
    assert_eq!(loops::reduce_shape(1000, 384, &t), loops::ReduceShape::Warp);
    assert_eq!(
        loops::reduce_shape(4, 1 << 20, &t),
        loops::ReduceShape::Block
    );
    let k = emit(&rms_rows(4, 1 << 20, ReduceOp::Sum, DType::F32));
    assert!(
        k.source.contains("__shared__ float rlx_sh[8]"),
        "{}",
        k.source
    );
    assert_eq!(k.launch.grid[0], 4);
}

#[test]
fn reductions_compile_for_every_op_shape_and_dtype() {
    let mut ks = Vec::new();
    for op in ReduceOp::ALL {
        for (rows, len) in [(100, 7), (100, 384), (3, 100_000)] {
            for dt in [
                DType::F32,
                DType::F16,
                DType::BF16,
                DType::F64,
                DType::I32,
                DType::I64,
            ] {
                ks.push(emit(&rms_rows(rows, len, op, dt)));
            }
        }
    }
    compile_check("reductions_compile_for_every_op_shape_and_dtype", &ks);
}

/// A contiguous f32 chain over one dim reads and writes `float4`; a scalar operand stays a
/// broadcast load, an offset not a multiple of 4 or a count not a multiple of 4 falls back.
#[test]
fn contiguous_f32_chains_use_float4() {
    let chain = |n: usize, offset: usize, dtype: DType| {
        let mut x = input(0, dtype, vec![1]);
        x.view.offset = offset;
        kernel(
            "gelu_axb",
            &[n],
            &[],
            vec![x, input(1, dtype, vec![0])],
            vec![
                node(Expr::Load(0), dtype),
                node(Expr::Load(1), dtype),
                node(Expr::Binary(BinaryOp::Mul, 0, 1), dtype),
                node(Expr::Unary(UnaryOp::GELU, 2), dtype),
            ],
            None,
            3,
        )
    };
    let k = emit(&chain(4096, 8, DType::F32));
    assert!(
        k.source
            .contains("reinterpret_cast<const float4*>(in0 + 8)[idx]"),
        "{}",
        k.source
    );
    assert!(k.source.contains("idx < 1024"), "{}", k.source);
    assert!(k.source.contains("in1[0]"), "{}", k.source);
    assert!(
        k.source.contains("make_float4(e0_3, e1_3, e2_3, e3_3)"),
        "{}",
        k.source
    );
    for fallback in [
        chain(4096, 2, DType::F32),
        chain(4098, 0, DType::F32),
        chain(4096, 0, DType::F64),
    ] {
        let s = emit(&fallback).source;
        assert!(!s.contains("float4") && !s.contains("ushort4"), "{s}");
    }
    // 16-bit floats move as ushort4 (8 bytes), converted per lane.
    let h = emit(&chain(4096, 4, DType::F16));
    assert!(
        h.source
            .contains("reinterpret_cast<const ushort4*>(in0 + 4)[idx]"),
        "{}",
        h.source
    );
    assert!(
        h.source.contains("make_ushort4(rlx_f32_to_f16(e0_3)"),
        "{}",
        h.source
    );
    // (An offset of 4 halves is not 16-byte aligned: the 8-byte path stays.)
    let b = emit(&chain(4096, 4, DType::BF16));
    assert!(b.source.contains("make_ushort4(rlx_f32_to_bf16(e0_3)"));
    // A row repeated over the outer dim (a bias) reads vector idx % (inner / 4); rows of
    // 92 halves are no multiple of 8, so the 8-byte path stays.
    let bias_gelu = kernel(
        "bias_gelu",
        &[64, 92],
        &[],
        vec![
            input(0, DType::F16, vec![92, 1]),
            input(1, DType::F16, vec![0, 1]),
        ],
        vec![
            node(Expr::Load(0), DType::F16),
            node(Expr::Load(1), DType::F16),
            node(Expr::Binary(BinaryOp::Add, 0, 1), DType::F16),
            node(Expr::Unary(UnaryOp::GELU, 2), DType::F16),
        ],
        None,
        3,
    );
    let row = emit(&bias_gelu);
    assert!(
        row.source
            .contains("reinterpret_cast<const ushort4*>(in1 + 0)[idx % 23]"),
        "{}",
        row.source
    );
    compile_check("contiguous_f32_chains_use_float4", &[k, h, b, row]);
}

/// `gelu(x + bias)` over `[rows, cols]` with the bias row broadcast: the FFN epilogue.
fn bias_gelu(dtype: DType, rows: usize, cols: usize) -> rlx_ir::kernel::LoopKernel {
    kernel(
        "bias_gelu",
        &[rows, cols],
        &[],
        vec![
            input(0, dtype, vec![cols as isize, 1]),
            input(1, dtype, vec![0, 1]),
        ],
        vec![
            node(Expr::Load(0), dtype),
            node(Expr::Load(1), dtype),
            node(Expr::Binary(BinaryOp::Add, 0, 1), dtype),
            node(Expr::Unary(UnaryOp::GELU, 2), dtype),
        ],
        None,
        3,
    )
}

/// f16/bf16 chains over rows that are multiples of 8 move 16-byte `uint4` vectors, two
/// per thread, the bias row read as vector `v % (cols / 8)` and erf evaluated in f32 (the
/// fast erf for 16-bit results, erff for f32); rows
/// of 100 halves keep the 8-byte path, rows of 4097 the scalar one, f32 keeps `float4`.
#[test]
fn half_chains_move_sixteen_bytes_two_vectors_per_thread() {
    let mut ks = Vec::new();
    for dt in [DType::F16, DType::BF16, DType::F32] {
        for cols in [384, 1536, 100, 4097] {
            for restrict in [true, false] {
                let k = loops::emit(&bias_gelu(dt, 64, cols), &Target::h200(), restrict, false)
                    .unwrap_or_else(|e| panic!("{e}"));
                let s = &k.source;
                let wide = dt != DType::F32 && cols % 8 == 0;
                assert_eq!(s.contains("uint4"), wide, "{dt} {cols}: {s}");
                let erf = if dt == DType::F32 {
                    "erff("
                } else {
                    "rlx_gelu_fast("
                };
                assert!(s.contains(erf), "{dt} {cols}: {s}");
                if wide {
                    let n8 = 64 * cols / 8;
                    assert!(
                        s.contains(&format!("v0 < {n8}")) && s.contains("v1 = v0 + 256"),
                        "{s}"
                    );
                    assert!(
                        s.contains(&format!(
                            "reinterpret_cast<const uint4*>(in1 + 0 + (v0 % {}) * 8)",
                            cols / 8
                        )),
                        "{s}"
                    );
                    assert!(s.contains("*reinterpret_cast<uint4*>(out + v1 * 8) = "));
                    assert_eq!(k.launch.grid[0] as usize, n8.div_ceil(512), "{dt} {cols}");
                    // Every load comes before the first store (the kernel may run in place).
                    let last_load = s.rfind("reinterpret_cast<const").unwrap();
                    let first_store = s.find("*reinterpret_cast<uint4*>(out").unwrap();
                    assert!(last_load < first_store, "{s}");
                }
                if cols == 100 {
                    assert_eq!(s.contains("ushort4"), dt != DType::F32, "{s}");
                    assert_eq!(s.contains("float4"), dt == DType::F32, "{s}");
                }
                if cols == 4097 {
                    assert!(!s.contains("ushort4") && !s.contains("float4"), "{s}");
                }
                ks.push(k);
            }
        }
    }
    // Mixed dtypes: an f32 bias read as two float4 per vector, the result stored as f16.
    let mut mixed = bias_gelu(DType::F16, 64, 384);
    mixed.inputs[1].dtype = DType::F32;
    mixed.body[1].dtype = DType::F32;
    mixed.body.insert(2, node(Expr::Cast(1), DType::F16));
    mixed.body[3] = node(Expr::Binary(BinaryOp::Add, 0, 2), DType::F16);
    mixed.body[4] = node(Expr::Unary(UnaryOp::GELU, 3), DType::F16);
    mixed.result = 4;
    let m = emit(&mixed);
    assert!(
        m.source.contains("const float4 a0_1_1 = ") && m.source.contains("uint4"),
        "{}",
        m.source
    );
    ks.push(m);
    compile_check("half_chains_move_sixteen_bytes_two_vectors_per_thread", &ks);
}
