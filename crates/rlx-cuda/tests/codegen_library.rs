//! Every library op family, lowered from a graph and planned for an H200: checks of the
//! plan (GEMM folding, fused epilogues, scratch) and an NVRTC compile of every generated
//! kernel (no GPU needed; skipped with a reason when NVRTC is absent).

mod support;

use rlx_cuda::codegen::gemm_mma::MMA_TILES;
use rlx_cuda::codegen::gemm_wgmma::WGMMA_TILES;
use rlx_cuda::codegen::Target;
use rlx_cuda::gemm::Activation;
use rlx_cuda::plan::{plan, Plan, Step};
use rlx_ir::{DType, Op, UnaryOp};
use support::cases::{
    ffn_norm_cases, flash_cases, fused_gemm_cases, gemm_norm_cases, head_split_cases,
    library_cases, wide_path_cases, Builder, Case,
};
use support::{compile_check, lower_for_cuda};

fn plan_case(name: &str) -> Plan {
    plan_with_program(library_cases(), name).1
}

/// The lowered program of case `name` and its plan.
fn plan_with_program(cases: Vec<Case>, name: &str) -> (rlx_ir::kernel::KernelProgram, Plan) {
    plan_for(cases, name, &Target::h200())
}

/// The lowered program of case `name` and its plan for `target`.
fn plan_for(
    cases: Vec<Case>,
    name: &str,
    target: &Target,
) -> (rlx_ir::kernel::KernelProgram, Plan) {
    let case = cases
        .into_iter()
        .find(|c| c.name == name)
        .expect("known case");
    let program = lower_for_cuda(&case.graph).unwrap_or_else(|e| panic!("{name}: {e}"));
    let p = plan(&program, target).unwrap_or_else(|e| panic!("{name}: {e}\n{program}"));
    (program, p)
}

/// An H200 with tensor-core flash attention turned off (`RLX_CUDA_FLASH=0`).
fn no_flash() -> Target {
    Target {
        flash_attention: false,
        ..Target::h200()
    }
}

/// The generated flash attention kernels of a plan.
fn flash_kernels(p: &Plan) -> Vec<&rlx_cuda::codegen::EmittedKernel> {
    p.kernels()
        .filter(|k| k.function.starts_with("rlx_flash_mma_"))
        .collect()
}

/// Labels of the planned steps.
fn labels(p: &Plan) -> Vec<String> {
    p.steps
        .iter()
        .map(|s| match s {
            Step::Kernel(k) => k.label.clone(),
            Step::Gemm(g) => g.label.clone(),
        })
        .collect()
}

/// Loop kernels of a program named after an op (`transpose_6`, ...).
fn loops_named(program: &rlx_ir::kernel::KernelProgram, op: &str) -> usize {
    program
        .kernels
        .iter()
        .filter(|k| matches!(k, rlx_ir::kernel::Kernel::Loop(_)) && k.name().starts_with(op))
        .count()
}

fn gemms(p: &Plan) -> Vec<&rlx_cuda::gemm::GemmSpec> {
    p.steps
        .iter()
        .filter_map(|s| if let Step::Gemm(g) = s { Some(g) } else { None })
        .collect()
}

#[test]
fn every_library_kernel_compiles_with_nvrtc() {
    let mut kernels = Vec::new();
    let mut failures = Vec::new();
    for case in library_cases() {
        match lower_for_cuda(&case.graph)
            .map_err(|e| e.to_string())
            .and_then(|p| plan(&p, &Target::h200()).map_err(|e| e.to_string()))
        {
            Ok(p) => kernels.extend(p.all_kernels().cloned()),
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "cases that do not plan:\n{}",
        failures.join("\n")
    );
    println!("{} kernels", kernels.len());
    // every kernel waits for its predecessor first (programmatic dependent launch)
    for k in &kernels {
        let body = &k.source[k.source.find('{').unwrap()..];
        assert!(body.starts_with("{\nRLX_GRID_WAIT();"), "{}", k.source);
    }
    compile_check("every_library_kernel_compiles_with_nvrtc", &kernels);
}

#[test]
fn shared_weights_fold_batches_into_one_gemm_with_fused_bias_relu() {
    let p = plan_case("matmul_bias_relu_f32");
    let g = gemms(&p);
    assert_eq!(g.len(), 1);
    assert_eq!((g[0].m, g[0].n, g[0].k, g[0].batch), (10, 3, 7, 1));
    assert!(g[0].bias.is_some());
    assert_eq!(g[0].activation, Activation::Relu);
    assert_eq!(p.steps.len(), 1, "the epilogue is fused into cuBLASLt");
}

#[test]
fn batched_and_broadcast_matmuls() {
    let p = plan_case("matmul_batched_gelu_f32");
    let g = gemms(&p);
    assert_eq!((g.len(), g[0].batch, g[0].b.batch_stride), (1, 2, 30));
    assert_eq!(
        p.steps.len(),
        2,
        "exact GELU runs as an in-place epilogue kernel"
    );
    assert!(p.scratch.is_empty());
    let p = plan_case("matmul_broadcast_cast_f32");
    assert_eq!(
        gemms(&p).len(),
        6,
        "non-affine broadcast batches run one GEMM each"
    );
    assert_eq!(
        p.scratch.len(),
        1,
        "a dtype-changing epilogue reads a scratch result"
    );
}

#[test]
fn convolutions_use_im2col_per_group_or_read_the_input_directly() {
    let p = plan_case("conv_grouped_f32");
    assert_eq!(gemms(&p).len(), 2);
    assert_eq!(p.kernels().count(), 2, "im2col + bias/epilogue");
    let p = plan_case("conv_1x1_f32");
    assert_eq!(p.kernels().count(), 1, "1x1 convolutions skip im2col");
}

#[test]
fn attention_is_one_kernel_with_shared_memory_per_tile() {
    let p = plan_case("attention_none_d256_f16");
    let k: Vec<_> = p.kernels().collect();
    assert_eq!(k.len(), 1);
    assert!(k[0].launch.shared_bytes > 48 * 1024);
    assert!(k[0].source.contains("rlx_warp_max"), "{}", k[0].source);
}

#[test]
fn large_half_attention_runs_as_two_gemms_around_a_softmax() {
    for mask in ["none", "causal", "additive"] {
        let name = format!("attention_gemm_{mask}_f16");
        let p = plan_for(library_cases(), &name, &no_flash()).1;
        let g = gemms(&p);
        assert_eq!((g.len(), p.kernels().count()), (2, 1), "{mask}");
        assert!(g[0].trans_b && (g[0].alpha - 0.2).abs() < 1e-12);
        assert_eq!((g[0].m, g[0].n, g[0].k, g[0].batch), (128, 128, 16, 64));
        assert_eq!((g[1].m, g[1].n, g[1].k), (128, 24, 128));
        assert_eq!(p.scratch, vec![64 * 128 * 128 * 2]);
    }
    // f32 keeps the fused kernel.
    let p = plan_case("attention_gemm_none_f32");
    assert_eq!((gemms(&p).len(), p.kernels().count()), (0, 1));
}

#[test]
fn half_attention_on_sm80_and_newer_is_one_tensor_core_flash_kernel() {
    for mask in ["none", "causal", "additive"] {
        for dt in ["f16", "bf16"] {
            let name = format!("head_split_gemm_{mask}_{dt}");
            let p = plan_for(head_split_cases(), &name, &Target::h200()).1;
            let f = flash_kernels(&p);
            assert_eq!(
                gemms(&p).len(),
                1,
                "{name}: only the projection: {:?}",
                labels(&p)
            );
            assert_eq!(f.len(), 1, "{name}: {:?}", labels(&p));
            assert!(p.scratch.is_empty(), "{name}: no score matrix in memory");
            assert!(f[0].label.contains("tensor-core flash"), "{}", f[0].label);
            assert!(f[0].source.contains(&format!("rlx_mma_{dt}(")));
        }
    }
    // The value head size 24 is no multiple of 16: the GEMM form stays.
    let p = plan_case("attention_gemm_none_f16");
    assert_eq!((gemms(&p).len(), flash_kernels(&p).len()), (2, 0));
    // Older GPUs, f32, head size 256 and the switch keep the other paths.
    let sm75 = Target {
        arch: "sm_75".into(),
        ..Target::h200()
    };
    for (name, target) in [
        ("attention_gemm_none_f16", sm75),
        ("attention_gemm_none_f16", no_flash()),
        ("attention_gemm_none_f32", Target::h200()),
        ("attention_none_d256_f16", Target::h200()),
    ] {
        let p = plan_for(library_cases(), name, &target).1;
        assert!(flash_kernels(&p).is_empty(), "{name} on {target:?}");
    }
    // Head sizes 32 and 48 (multiples of 16) take it, with the explicit scale folded into
    // base 2.
    let p = plan_case("attention_causal_d48_f16");
    let f = flash_kernels(&p);
    assert_eq!(f.len(), 1);
    assert!(f[0]
        .source
        .contains(&format!("{:?}f", (0.3 * std::f64::consts::LOG2_E) as f32)));
    assert_eq!(flash_kernels(&plan_case("attention_none_d32_f16")).len(), 1);
}

#[test]
fn flash_attention_kernels_compile_with_nvrtc() {
    let mut kernels = Vec::new();
    for case in flash_cases() {
        let program = lower_for_cuda(&case.graph).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let p = plan(&program, &Target::h200())
            .unwrap_or_else(|e| panic!("{}: {e}\n{program}", case.name));
        let f = flash_kernels(&p);
        assert_eq!(f.len(), 1, "{}: {:?}", case.name, labels(&p));
        assert_eq!(p.steps.len(), 1, "{}: {:?}", case.name, labels(&p));
        kernels.extend(f.into_iter().cloned());
    }
    println!("{} kernels", kernels.len());
    compile_check("flash_attention_kernels_compile_with_nvrtc", &kernels);
}

#[test]
fn flash_attention_tiles_follow_the_problem() {
    let flash = |name: &str| {
        let p = plan_for(flash_cases(), name, &Target::h200()).1;
        flash_kernels(&p)[0].clone()
    };
    // 24 matrices of 300 queries: 5 blocks of 64 queries would leave SMs idle, 10 blocks
    // of 32 do not.
    let k = flash("flash_none_d64_s300_bh24_f16");
    assert_eq!((k.launch.grid[0], k.launch.block), (24 * 10, 64));
    // Head-split [8, 128, 8, 32] operands read in place: rows 256 elements apart, 16-byte
    // aligned, so K and V tiles still load with cp.async; the result is written in pairs.
    let p = plan_for(
        head_split_cases(),
        "head_split_gemm_none_f16",
        &Target::h200(),
    )
    .1;
    let k = flash_kernels(&p)[0].clone();
    assert_eq!((k.launch.grid[0], k.launch.block), (64 * 4, 64));
    // Head size 32 with 64-key tiles: registers capped at 96, 10 blocks of 64 threads.
    assert!(
        k.source.contains("__launch_bounds__(64, 10)"),
        "{}",
        k.source
    );
    // 128 keys in two 64-key tiles: both in flight, no buffer reused.
    assert!(k.label.contains("64k tiles, 2 in flight"), "{}", k.label);
    // 32-key tiles: all four in flight at once (4 x 32 x (40 + 40) halves).
    let short_tiles = Target {
        flash_keys: 32,
        ..Target::h200()
    };
    let p = plan_for(head_split_cases(), "head_split_gemm_none_f16", &short_tiles).1;
    let k = flash_kernels(&p)[0].clone();
    assert!(k.label.contains("32k tiles, 4 in flight"), "{}", k.label);
    assert_eq!(k.launch.shared_bytes, 4 * 32 * 80 * 2);
    assert!(
        k.source.contains("rlx_cp_async_wait<4 - 1>()"),
        "{}",
        k.source
    );
    assert!(!k.source.contains("__launch_bounds__(64, "), "{}", k.source);
    assert!(k.source.contains("rlx_cp_async16(") && k.source.contains("* 256"));
    assert!(k.source.contains("*(unsigned*)(out + "), "{}", k.source);
    // One matrix: one warp per 16 queries, as many blocks as possible.
    let k = flash("flash_none_d128_s300_bh1_bf16");
    assert_eq!((k.launch.grid[0], k.launch.block), (19, 32));
    assert!(k.source.contains("rlx_mma_bf16") && !k.source.contains("rlx_mma_f16"));
    // Two 64-key tiles of K and V (d = 128, rows padded to 136), double-buffered.
    assert_eq!(k.launch.shared_bytes, 2 * 64 * (136 + 136) * 2);
    // Packed 16-byte-aligned rows load with cp.async; a single query is one warp.
    assert!(k.source.contains("rlx_cp_async16("));
    let k = flash("flash_decode_sk300_f16");
    assert_eq!((k.launch.grid[0], k.launch.block), (8, 32));
    // Causal blocks stop at their last visible key tile.
    let k = flash("flash_causal_sq17_sk40_f16");
    assert!(k.source.contains("kvis"), "{}", k.source);
    // 768 matrices of 128 queries (head size 32): both 64-key tiles fit at once, so a block
    // loads them once and runs both 64-query tiles of its matrix; causal blocks do not.
    for mask in ["none", "additive"] {
        let k = flash(&format!("flash_{mask}_d32_s128_bh768_f16"));
        assert_eq!((k.launch.grid[0], k.launch.block), (768, 128));
        assert!(
            k.label.contains("all 2 resident for 2 query tiles"),
            "{}",
            k.label
        );
    }
    // Without a mask or key guard the scale rides on the exponent's FMA (the row max is
    // taken unscaled); masked and guarded kernels scale every score first.
    let k = flash("flash_none_d32_s128_bh768_f16");
    assert!(k.source.contains("rlx_ex2(fmaf(s[n][0], "), "{}", k.source);
    assert!(!k.source.contains("float x = s[n][e] *"), "{}", k.source);
    let k = flash("flash_additive_d32_s128_bh768_f16");
    assert!(k.source.contains("float x = s[n][e] *"), "{}", k.source);
    assert!(k.source.contains("rlx_ex2(s[n][0] - mu0)"), "{}", k.source);
    let k = flash("flash_causal_d32_s128_bh768_f16");
    assert_eq!(k.launch.grid[0], 768 * 2);
    let per_tile = Target {
        flash_resident: false,
        ..Target::h200()
    };
    let p = plan_for(flash_cases(), "flash_none_d32_s128_bh768_f16", &per_tile).1;
    let k = flash_kernels(&p)[0].clone();
    assert_eq!(k.launch.grid[0], 768 * 2);
    assert!(k.label.contains("2 in flight"), "{}", k.label);
}

#[test]
fn bias_and_residual_fuse_into_cublaslt() {
    let p = plan_case("matmul_bias_residual_f32");
    let g = gemms(&p);
    assert_eq!(p.steps.len(), 1, "bias and residual ride on the GEMM");
    assert!(g[0].bias.is_some() && g[0].residual.is_some());
}

#[test]
fn head_split_attention_kernels_compile_with_nvrtc() {
    let mut kernels = Vec::new();
    for case in head_split_cases() {
        let program = lower_for_cuda(&case.graph).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let p = plan(&program, &Target::h200())
            .unwrap_or_else(|e| panic!("{}: {e}\n{program}", case.name));
        kernels.extend(p.kernels().cloned());
    }
    println!("{} kernels", kernels.len());
    compile_check("head_split_attention_kernels_compile_with_nvrtc", &kernels);
}

#[test]
fn head_split_attention_reads_and_writes_in_place() {
    for mask in ["none", "causal", "additive"] {
        for dt in ["f32", "f16", "bf16"] {
            let name = format!("head_split_small_{mask}_{dt}");
            let (program, p) = plan_with_program(head_split_cases(), &name);
            assert_eq!(loops_named(&program, "transpose"), 4, "{name}:\n{program}");
            let l = labels(&p);
            assert!(
                l.iter().all(|l| !l.starts_with("transpose")),
                "{name}: every transpose is dropped: {l:?}\n{program}"
            );
            assert_eq!(
                p.steps.len(),
                program.kernels.len() - 4,
                "{name}: {l:?}\n{program}"
            );
            let attention = l.iter().find(|l| l.starts_with("attention")).unwrap();
            assert_eq!(attention.matches("transpose").count(), 4, "{attention}");
            let k = p
                .kernels()
                .find(|k| k.label.starts_with("attention"))
                .unwrap();
            // q is read from the projection's [2, 10, 3, 16] result with rows 48 apart; the
            // tensor-core kernel (f16, bf16) in 32-bit offsets, as everything fits
            let ity = if dt == "f32" { "long long" } else { "int" };
            assert!(
                k.source.contains(&format!("({ity})(row) * 48")),
                "{}",
                k.source
            );
        }
    }
}

#[test]
fn a_bert_layer_projection_runs_as_one_gemm_and_attention_alone() {
    // q, k and v sliced from one projection plus bias, as `rlx-models` builds BERT: the bias
    // is the GEMM's (cuBLASLt) epilogue, so the three head splits and the result's merge are
    // plain copies that attention reads and writes through instead
    for dt in [DType::F16, DType::F32] {
        let (batch, seq, heads, dim) = (2, 10, 3, 16);
        let hidden = heads * dim;
        let mut b = Builder::new("bert_qkv", dt);
        let x = b.input(dt, &[batch, seq, hidden]);
        let w = b.param(dt, &[hidden, 3 * hidden]);
        let bias = b.param(dt, &[3 * hidden]);
        let qkv = b.g().matmul(x, w).unwrap();
        let qkv = b.g().add(qkv, bias).unwrap();
        let y =
            rlx_ir::sample::head_split_attention(b.g(), qkv, batch, seq, heads, dim, None, false)
                .unwrap();
        let (program, p) = plan_with_program(vec![b.done(y)], "bert_qkv");
        let l = labels(&p);
        assert_eq!(p.steps.len(), 2, "{dt}: {l:?}\n{program}");
        assert!(matches!(p.steps[0], Step::Gemm(_)), "{dt}: {l:?}");
        assert!(
            gemms(&p)[0].bias.is_some(),
            "{dt}: the bias rides in cuBLASLt"
        );
        assert!(l[1].starts_with("attention"), "{dt}: {l:?}");
        assert_eq!(l[1].matches("in place of").count(), 1, "{}", l[1]);
    }
}

#[test]
fn head_split_gemm_attention_walks_heads_as_a_second_batch_level() {
    for mask in ["none", "causal", "additive"] {
        let name = format!("head_split_gemm_{mask}_f16");
        let (program, p) = plan_for(head_split_cases(), &name, &no_flash());
        let g = gemms(&p);
        assert_eq!(
            g.len(),
            3,
            "projection + two attention GEMMs: {:?}",
            labels(&p)
        );
        assert_eq!(
            p.steps.len(),
            program.kernels.len() - 4 + 2,
            "{:?}",
            labels(&p)
        );
        let (s, o) = (g[1], g[2]);
        // [8, 128, 8, 32] operands: batches are heads (stride 32), outer batches sequences
        // (stride 128 * 256); rows are 256 elements apart.
        assert_eq!((s.batch, s.outer), (8, 8), "{}", s.describe());
        assert_eq!((s.a.batch_stride, s.a.outer_stride), (32, 128 * 256));
        assert_eq!((s.a.row_stride, s.b.row_stride), (Some(256), Some(256)));
        assert!(s.trans_b);
        assert_eq!(
            (s.c.batch_stride, s.c.outer_stride, s.c.row_stride),
            (128 * 128, 8 * 128 * 128, None)
        );
        assert_eq!(
            (o.c.batch_stride, o.c.outer_stride, o.c.row_stride),
            (32, 128 * 256, Some(256))
        );
        assert_eq!(o.b.row_stride, Some(256));
        assert_eq!(o.a.arg, s.c.arg, "P V reads the softmaxed scores");
    }
}

#[test]
fn copies_with_a_second_reader_are_kept() {
    let (program, p) = plan_with_program(head_split_cases(), "head_split_second_readers_f16");
    let l = labels(&p);
    let transposes = l.iter().filter(|l| l.starts_with("transpose")).count();
    // q's copy also feeds the softmax, the result is an output itself: both copies stay;
    // k's and v's are dropped.
    assert_eq!(loops_named(&program, "transpose"), 4, "{program}");
    assert_eq!(transposes, 2, "{l:?}\n{program}");
    let attention = l.iter().find(|l| l.starts_with("attention")).unwrap();
    assert_eq!(attention.matches("transpose").count(), 2, "{attention}");
}

/// Layer norm (with a `tanh` epilogue and a cast-to-f32 epilogue) and RMS norm over
/// `[rows, len]` rows.
fn norm_cases(dt: DType, rows: usize, len: usize) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut b = Builder::new(&format!("ln_{dt}_{len}"), dt);
    let x = b.input(dt, &[rows, len]);
    let s = b.param(dt, &[len]);
    let sh = b.param(dt, &[len]);
    let y = b.g().layer_norm(x, s, sh, 1e-12).unwrap();
    cases.push(b.done(y));
    let mut b = Builder::new(&format!("ln_tanh_{dt}_{len}"), dt);
    let x = b.input(dt, &[rows, len]);
    let s = b.param(dt, &[len]);
    let sh = b.param(dt, &[len]);
    let y = b.g().layer_norm(x, s, sh, 1e-5).unwrap();
    let y = b.g().unary(UnaryOp::Tanh, y).unwrap();
    cases.push(b.done(y));
    let mut b = Builder::new(&format!("ln_cast_{dt}_{len}"), dt);
    let x = b.input(dt, &[rows, len]);
    let s = b.param(dt, &[len]);
    let sh = b.param(dt, &[1]);
    let y = b.g().layer_norm(x, s, sh, 1e-5).unwrap();
    let y = b.g().push(Op::Cast(DType::F32), &[y], None).unwrap();
    cases.push(b.done(y));
    let mut b = Builder::new(&format!("rms_{dt}_{len}"), dt);
    let x = b.input(dt, &[rows, len]);
    let s = b.param(dt, &[len]);
    let y = b.g().rms_norm(x, s, 1e-6).unwrap();
    cases.push(b.done(y));
    cases
}

/// Norm rows up to 4096 elements are held in registers and move as vectors of up to 16
/// bytes; rows of 4097 keep the general path. Every variant compiles.
#[test]
fn norm_rows_in_registers_compile_with_nvrtc() {
    let mut kernels = Vec::new();
    for dt in [DType::F16, DType::BF16, DType::F32] {
        for len in [384, 1536, 100, 4097] {
            for case in norm_cases(dt, 300, len) {
                let name = case.name.clone();
                let program = lower_for_cuda(&case.graph).unwrap_or_else(|e| panic!("{name}: {e}"));
                let p = plan(&program, &Target::h200())
                    .unwrap_or_else(|e| panic!("{name}: {e}\n{program}"));
                let norm: Vec<_> = p
                    .kernels()
                    .filter(|k| {
                        k.function.starts_with("rlx_layer_norm_")
                            || k.function.starts_with("rlx_rms_norm_")
                    })
                    .collect();
                assert_eq!(norm.len(), 1, "{name}: {:?}", labels(&p));
                let s = &norm[0].source;
                assert_eq!(
                    s.contains("// rows in registers"),
                    len != 4097,
                    "{name}: {s}"
                );
                // 16-byte vectors: 4 floats or 8 halves.
                let (sixteen, width) = if dt == DType::F32 {
                    ("float4", 4)
                } else {
                    ("uint4", 8)
                };
                assert_eq!(s.contains(sixteen), len % width == 0, "{name}: {s}");
                kernels.extend(p.kernels().cloned());
            }
        }
    }
    println!("{} kernels", kernels.len());
    compile_check("norm_rows_in_registers_compile_with_nvrtc", &kernels);
}

/// One MiniLM-shaped encoder FFN block in f16 (hidden 384, FFN 1536, 256 rows): the exact
/// GELU epilogue after the first GEMM moves 16-byte vectors two per thread, and the layer
/// norm holds each row in registers, 16 lanes per row with 16-byte vectors.
#[test]
fn encoder_ffn_kernels_take_the_wide_paths() {
    let dt = DType::F16;
    let mut b = Builder::new("encoder_ffn_f16", dt);
    let x = b.input(dt, &[2, 128, 384]);
    let w1 = b.param(dt, &[384, 1536]);
    let b1 = b.param(dt, &[1536]);
    let w2 = b.param(dt, &[1536, 384]);
    let b2 = b.param(dt, &[384]);
    let g = b.param(dt, &[384]);
    let beta = b.param(dt, &[384]);
    let f = b.g().matmul(x, w1).unwrap();
    let f = b.g().add(f, b1).unwrap();
    let f = b.g().unary(UnaryOp::GELU, f).unwrap();
    let f = b.g().matmul(f, w2).unwrap();
    let f = b.g().add(f, b2).unwrap();
    let r = b.g().add(f, x).unwrap();
    let y = b.g().layer_norm(r, g, beta, 1e-12).unwrap();
    let case = b.done(y);
    let program = lower_for_cuda(&case.graph).unwrap_or_else(|e| panic!("{e}"));
    let p = plan(&program, &Target::h200()).unwrap_or_else(|e| panic!("{e}\n{program}"));
    let gelu: Vec<_> = p
        .kernels()
        .filter(|k| k.source.contains("rlx_gelu_fast("))
        .collect();
    assert_eq!(gelu.len(), 1, "{:?}", labels(&p));
    let s = &gelu[0].source;
    // too large a result for the fused tensor-core GEMMs: the GELU's GEMM offers nothing;
    // the second GEMM and the layer norm after it may run as one kernel
    assert_eq!(p.choices.len(), 1, "{:?}", labels(&p));
    assert!(p.choices[0].fused[0]
        .function
        .starts_with("rlx_gemm_layer_norm_"));
    assert!(
        gelu[0].function.starts_with("rlx_ew_"),
        "{}",
        gelu[0].function
    );
    assert!(
        s.contains("reinterpret_cast<const uint4*>") && s.contains("v1 = v0 + 256"),
        "{s}"
    );
    let ln: Vec<_> = p
        .kernels()
        .filter(|k| k.function.starts_with("rlx_layer_norm_"))
        .collect();
    assert_eq!(ln.len(), 1, "{:?}", labels(&p));
    assert!(
        ln[0]
            .source
            .contains("// rows in registers: 16 lanes per row, 8-wide vectors, 3 per lane"),
        "{}",
        ln[0].source
    );
    // 256 rows, 16 rows per block of 256 threads.
    assert_eq!(ln[0].launch.grid[0], 16);
    let kernels: Vec<_> = p.kernels().cloned().collect();
    compile_check("encoder_ffn_kernels_take_the_wide_paths", &kernels);
}

#[test]
fn gemms_with_unfusable_epilogues_offer_the_fused_tensor_core_kernel() {
    let mut kernels = Vec::new();
    for case in fused_gemm_cases() {
        let (_, p) = plan_with_program(fused_gemm_cases(), &case.name);
        assert_eq!(p.choices.len(), 1, "{}", case.name);
        let c = &p.choices[0];
        assert!(matches!(p.steps[c.first], Step::Gemm(_)), "{}", case.name);
        assert!(matches!(p.steps[c.last], Step::Kernel(_)), "{}", case.name);
        assert_eq!(
            c.fused.len(),
            MMA_TILES.len() + WGMMA_TILES.len(),
            "{}: every tiling of both kernels applies",
            case.name
        );
        // operands a and b, the output, then the epilogue kernel's extra inputs
        let Step::Kernel(epi) = &p.steps[c.last] else {
            unreachable!()
        };
        for (i, k) in c.fused.iter().enumerate() {
            let family = if i < MMA_TILES.len() {
                "rlx_gemm_mma_"
            } else {
                "rlx_gemm_wgmma_"
            };
            assert!(k.function.starts_with(family), "{}", k.function);
            assert_eq!(k.args.len(), epi.args.len() + 1, "{}", case.name);
            assert_eq!(k.args[2], *epi.args.last().unwrap(), "{}", case.name);
        }
        // every tiling of one epilogue, one tiling of the others (NVRTC time)
        if case.name.contains("bias_gelu") {
            kernels.extend(p.all_kernels().cloned());
        } else {
            kernels.extend(p.kernels().cloned());
            kernels.push(c.fused[0].clone());
        }
    }
    // f32, and a k that is not a multiple of 8, keep cuBLASLt plus the epilogue kernel only
    for (dt, k) in [(DType::F32, 64), (DType::F16, 20)] {
        let mut b = Builder::new(&format!("no_fused_{dt}_{k}"), dt);
        let x = b.input(dt, &[16, k]);
        let w = b.param(dt, &[k, 64]);
        let y = b.g().matmul(x, w).unwrap();
        let y = b.g().unary(UnaryOp::GELU, y).unwrap();
        let case = b.done(y);
        let name = case.name.clone();
        let (_, p) = plan_with_program(vec![case], &name);
        assert!(p.choices.is_empty(), "{name}");
    }
    // a bias + tanh-GELU epilogue fuses into cuBLASLt: nothing to choose
    let mut b = Builder::new("cublaslt_fuses", DType::F16);
    let x = b.input(DType::F16, &[16, 64]);
    let w = b.param(DType::F16, &[64, 64]);
    let y = b.g().matmul(x, w).unwrap();
    let y = b.g().unary(UnaryOp::GELU_TANH, y).unwrap();
    let (_, p) = plan_with_program(vec![b.done(y)], "cublaslt_fuses");
    assert!(p.choices.is_empty());
    // an FFN of 64 rows (65 536 results) offers the Hopper kernel's tilings after the
    // mma.sync kernel's on sm_90a, only the latter on sm_90; at batch 256 x 128 neither
    for (target, hopper) in [
        (Target::h200(), true),
        (
            Target {
                arch: "sm_90".into(),
                ..Target::h200()
            },
            false,
        ),
    ] {
        for (rows, offered) in [
            (
                64,
                MMA_TILES.len() + if hopper { WGMMA_TILES.len() } else { 0 },
            ),
            (256 * 128, 0),
        ] {
            let mut b = Builder::new("ffn", DType::F16);
            let x = b.input(DType::F16, &[rows, 384]);
            let w = b.param(DType::F16, &[384, 1024]);
            let bias = b.param(DType::F16, &[1024]);
            let y = b.g().matmul(x, w).unwrap();
            let y = b.g().add(y, bias).unwrap();
            let y = b.g().unary(UnaryOp::GELU, y).unwrap();
            let p = plan_for(vec![b.done(y)], "ffn", &target).1;
            let fused = p.choices.first().map_or(0, |c| c.fused.len());
            assert_eq!(fused, offered, "{} rows {rows}", target.arch);
            if hopper && offered > 0 {
                let c = &p.choices[0];
                let k = &c.fused[MMA_TILES.len()];
                assert!(k.function.starts_with("rlx_gemm_wgmma_"), "{}", k.function);
                // 128-row blocks, 128 columns each; the bias read at the column itself
                assert_eq!(k.launch.grid, [1024 / 128, 1]);
                assert!(k.source.contains("const int q1 = col + e;"), "{}", k.source);
                assert!(k
                    .source
                    .contains("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"));
                kernels.extend(c.fused[MMA_TILES.len()..].iter().cloned());
            }
        }
    }
    println!("{} fused GEMM kernels", kernels.len());
    compile_check(
        "gemms_with_unfusable_epilogues_offer_the_fused_tensor_core_kernel",
        &kernels,
    );
}

/// A GEMM whose result only a row norm reads offers the GEMM + norm kernel (in every tiling
/// that fits) as a choice against the GEMM step and the norm step; the kernel takes the
/// operands, the norm's output, the GEMM epilogue's inputs, then the norm's parameters, and
/// NVRTC compiles it. Nothing is offered where it cannot run: rows over 384 columns, f32,
/// a result read by another kernel too, or `sm_90` without the `a` features.
#[test]
fn gemms_followed_by_a_row_norm_offer_the_gemm_norm_kernel() {
    let mut kernels = Vec::new();
    for case in gemm_norm_cases() {
        let (program, p) = plan_with_program(gemm_norm_cases(), &case.name);
        assert_eq!(p.choices.len(), 1, "{}: {:?}", case.name, labels(&p));
        let c = &p.choices[0];
        let Step::Gemm(g) = &p.steps[c.first] else {
            panic!("{}: the choice's first step is no GEMM", case.name)
        };
        let Step::Kernel(norm) = &p.steps[c.last] else {
            panic!("{}: the choice's second step is no kernel", case.name)
        };
        assert_eq!(c.last, c.first + 1);
        let family = if case.name.contains("rms") {
            "rlx_gemm_rms_norm_"
        } else {
            "rlx_gemm_layer_norm_"
        };
        let out = program.outputs[0].1;
        for k in &c.fused {
            assert!(k.function.starts_with(family), "{}", k.function);
            // one block column, 128- or 64-row blocks of a warpgroup per 64 rows
            let bm = k.launch.block as usize / 2;
            assert!(bm == 128 || bm == 64, "{}", k.label);
            assert_eq!(k.launch.grid, [1, g.m.div_ceil(bm) as u32], "{}", case.name);
            assert_eq!(k.args[..2], [g.a.arg, g.b.arg]);
            // the norm's own output (through the cast epilogue, the program's output)
            let norm_out = norm.args[norm.args.len() - 1];
            if case.name.contains("cast") {
                assert_eq!(k.args[2], rlx_cuda::codegen::ArgRef::Buffer(out));
            } else {
                assert_eq!(k.args[2], norm_out, "{}", case.name);
            }
            // the rows' statistics by warp shuffles; rows past the end read the last row,
            // so only a partial last block needs the clamp
            assert!(k.source.contains("rlx_warp_sum(sq[i])"), "{}", k.source);
            assert_eq!(
                k.source.contains(&format!("min(bm0 + r, {})", g.m - 1)),
                g.m % bm != 0,
                "{}",
                k.label
            );
            // lane groups past the row's end only where 4-column groups do not fill the lanes
            assert_eq!(
                k.source.contains(&format!("* 4 < {})", g.n)),
                g.n % 128 != 0,
                "{}",
                k.label
            );
        }
        kernels.extend(c.fused.iter().cloned());
    }
    // refusals: rows too long, f32, a second reader, sm_90
    let refused = |name: &str, dt: DType, n: usize, second_reader: bool, target: &Target| {
        let mut b = Builder::new(name, dt);
        let x = b.input(dt, &[64, 64]);
        let w = b.param(dt, &[64, n]);
        let scale = b.param(dt, &[n]);
        let shift = b.param(dt, &[n]);
        let y = b.g().matmul(x, w).unwrap();
        let mut z = b.g().layer_norm(y, scale, shift, 1e-5).unwrap();
        if second_reader {
            z = b.g().add(z, y).unwrap();
        }
        let (_, p) = plan_for(vec![b.done(z)], name, target);
        assert!(p.choices.is_empty(), "{name}: {:?}", labels(&p));
    };
    let sm90 = Target {
        arch: "sm_90".into(),
        ..Target::h200()
    };
    refused("rows_448", DType::F16, 448, false, &Target::h200());
    refused("f32_rows", DType::F32, 384, false, &Target::h200());
    refused("second_reader", DType::F16, 384, true, &Target::h200());
    refused("sm_90", DType::F16, 384, false, &sm90);
    println!("{} GEMM + norm kernels", kernels.len());
    compile_check(
        "gemms_followed_by_a_row_norm_offer_the_gemm_norm_kernel",
        &kernels,
    );
}

/// With `a_prologue`, a feed-forward block's second GEMM and the norm after it offer a
/// second choice that also takes in the first GEMM's epilogue step (run in place over its
/// result): the same tilings and launches as the GEMM + norm choice, reading the first
/// GEMM's raw result as A and applying that epilogue to A's tiles in shared memory, its
/// inputs (the bias) as the last arguments; every kernel NVRTC compiles. Without the option,
/// or when another kernel also reads the intermediate, only the GEMM + norm choice is left.
#[test]
fn feed_forward_blocks_offer_the_first_epilogue_applied_to_the_second_gemms_a() {
    use rlx_cuda::codegen::ArgRef;
    let on = Target {
        a_prologue: true,
        ..Target::h200()
    };
    let off = Target {
        a_prologue: false,
        ..Target::h200()
    };
    let mut kernels = Vec::new();
    for case in ffn_norm_cases() {
        let (program, p) = plan_for(ffn_norm_cases(), &case.name, &on);
        assert_eq!(p.choices.len(), 2, "{}: {:?}", case.name, labels(&p));
        let (norm, mapped) = (&p.choices[0], &p.choices[1]);
        assert_eq!((mapped.first, mapped.last), (norm.first - 1, norm.last));
        let Step::Gemm(first) = &p.steps[mapped.first - 1] else {
            panic!("{}: no GEMM before the epilogue step", case.name)
        };
        let Step::Kernel(epi) = &p.steps[mapped.first] else {
            panic!(
                "{}: the mapped choice does not start at a kernel",
                case.name
            )
        };
        // the epilogue runs in place over the first GEMM's result
        assert_eq!(epi.args[0], first.c.arg, "{}", case.name);
        assert_eq!(epi.args.last(), Some(&first.c.arg), "{}", case.name);
        let same = |a: ArgRef, b: ArgRef| match (a, b) {
            (ArgRef::Buffer(a), ArgRef::Buffer(b)) => {
                rlx_cuda::plan::root(&program, a) == rlx_cuda::plan::root(&program, b)
            }
            _ => a == b,
        };
        assert_eq!(mapped.fused.len(), norm.fused.len(), "{}", case.name);
        for (k, n) in mapped.fused.iter().zip(&norm.fused) {
            assert_eq!(k.launch, n.launch, "{}", k.label);
            assert_eq!(k.args[..n.args.len()], n.args[..], "{}", k.label);
            assert!(same(k.args[0], first.c.arg), "{}", k.label);
            assert_eq!(
                k.args[n.args.len()..],
                epi.args[1..epi.args.len() - 1],
                "{}",
                k.label
            );
            assert!(k.label.contains(" on A mapped by "), "{}", k.label);
            // the thread's own chunks, rewritten only inside A
            assert!(k.source.contains("if (gr < "), "{}", k.source);
            let map_inputs = epi.args.len() - 2;
            // eight elements of a chunk at once, the bias read as one 16-byte vector
            assert!(k.source.contains("const uint4 av_0 = "), "{}", k.source);
            assert_eq!(
                k.source.contains("const uint4 aepv1_0 = "),
                map_inputs > 0,
                "{}",
                case.name
            );
            assert_eq!(k.source.contains("aep1"), map_inputs > 0, "{}", case.name);
        }
        let (_, p_off) = plan_for(ffn_norm_cases(), &case.name, &off);
        assert_eq!(p_off.choices.len(), 1, "{}", case.name);
        assert_eq!(p_off.choices[0], *norm, "{}", case.name);
        kernels.extend(mapped.fused.iter().cloned());
    }
    // the intermediate read by another kernel too: no mapped choice
    let dt = DType::F16;
    let mut b = Builder::new("ffn_second_reader", dt);
    let x = b.input(dt, &[130, 64]);
    let w1 = b.param(dt, &[64, 1024]);
    let w2 = b.param(dt, &[1024, 64]);
    let w3 = b.param(dt, &[1024, 64]);
    let scale = b.param(dt, &[64]);
    let shift = b.param(dt, &[64]);
    let h = b.g().matmul(x, w1).unwrap();
    let h = b.g().unary(UnaryOp::GELU, h).unwrap();
    let y = b.g().matmul(h, w2).unwrap();
    let z = b.g().layer_norm(y, scale, shift, 1e-5).unwrap();
    let other = b.g().matmul(h, w3).unwrap();
    let z = b.g().add(z, other).unwrap();
    let (_, p) = plan_for(vec![b.done(z)], "ffn_second_reader", &on);
    assert!(
        p.choices.iter().all(|c| c.last == c.first + 1),
        "{:?}",
        labels(&p)
    );
    println!("{} mapped GEMM + norm kernels", kernels.len());
    // split into parts as a compile does (NVRTC, no GPU needed), each part compiles alone
    if support::nvrtc_ready("feed_forward_program_parts") {
        let opts = rlx_cuda::nvrtc::options(&on.arch);
        let parts = rlx_cuda::codegen::program_sources(&kernels);
        assert!(parts.len() > 1, "{}", parts.len());
        for (i, (src, _)) in parts.iter().enumerate() {
            rlx_cuda::nvrtc::compile(&format!("part_{i}"), src, &opts)
                .unwrap_or_else(|log| panic!("part {i}: {log}"));
        }
    }
}

/// A function listing test cases.
type CaseList = fn() -> Vec<Case>;

/// A GEMM whose bias + GELU pass takes the scalar elementwise form (odd columns).
fn scalar_gelu_case() -> Vec<Case> {
    let dt = DType::F32;
    let mut b = Builder::new("gelu_bias_odd_f32", dt);
    let x = b.input(dt, &[33, 64]);
    let w = b.param(dt, &[64, 101]);
    let bias = b.param(dt, &[101]);
    let y = b.g().matmul(x, w).unwrap();
    let y = b.g().add(y, bias).unwrap();
    let y = b.g().unary(UnaryOp::GELU, y).unwrap();
    vec![b.done(y)]
}

#[test]
fn streams_the_step_before_wrote_walk_back_to_front_past_the_threshold_and_compile() {
    let at = |t: Option<usize>| Target {
        walk_back_above: t,
        ..Target::h200()
    };
    let walking = |p: &Plan| -> Vec<rlx_cuda::codegen::EmittedKernel> {
        p.kernels().filter(|k| k.walks_back).cloned().collect()
    };
    let mut kernels = Vec::new();
    // a projection then attention (flash on f16/bf16); a GEMM then its bias + GELU pass
    let ffn = ffn_norm_cases()[0].name.clone();
    let cases: [(CaseList, &str); 5] = [
        (head_split_cases, "head_split_gemm_none_f16"),
        (head_split_cases, "head_split_small_causal_bf16"),
        (ffn_norm_cases, &ffn),
        // the 4-wide and the scalar elementwise forms (f32)
        (wide_path_cases, "wide_gelu_bias_1536_f32"),
        (scalar_gelu_case, "gelu_bias_odd_f32"),
    ];
    for (cases, name) in cases {
        // small streams stay forward under the default threshold (half of 50 MiB), and off
        for t in [Some(25 << 20), None] {
            let (_, p) = plan_for(cases(), name, &at(t));
            assert!(walking(&p).is_empty(), "{name} at {t:?}: {:?}", labels(&p));
        }
        let (program, p) = plan_for(cases(), name, &at(Some(0)));
        let back = walking(&p);
        assert_eq!(back.len(), 1, "{name}: {:?}", labels(&p));
        let k = &back[0];
        assert!(k.label.contains("walks back to front"), "{}", k.label);
        let walk = if k.function.starts_with("rlx_flash_mma_") {
            "gridDim.x - 1 - blockIdx.x"
        } else {
            " - 1 - w"
        };
        assert!(k.source.contains(walk), "{name}: {}", k.source);
        // it reads what the step right before it wrote
        let i = p
            .steps
            .iter()
            .position(|s| matches!(s, Step::Kernel(s) if s == k))
            .unwrap();
        let Step::Gemm(g) = &p.steps[i - 1] else {
            panic!(
                "{name}: no GEMM before the walking kernel: {:?}",
                labels(&p)
            )
        };
        let same = |a: &rlx_cuda::codegen::ArgRef| match (a, g.c.arg) {
            (rlx_cuda::codegen::ArgRef::Buffer(a), rlx_cuda::codegen::ArgRef::Buffer(c)) => {
                rlx_cuda::plan::root(&program, *a) == rlx_cuda::plan::root(&program, c)
            }
            (a, c) => *a == c,
        };
        assert!(k.args.iter().any(same), "{name}: {:?}", k.args);
        // the step after a walking kernel walks forward again
        assert!(
            p.steps[i + 1..]
                .iter()
                .all(|s| !matches!(s, Step::Kernel(s) if s.walks_back)),
            "{name}: {:?}",
            labels(&p)
        );
        kernels.push(k.clone());
    }
    compile_check("walking_back_kernels_compile_with_nvrtc", &kernels);
}
