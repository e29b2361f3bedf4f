//! Mixed precision (`CompileOptions::precision`) on the CPU: products in f16/bf16 with f32
//! accumulation stay close to the f32 result, weights are converted once per value, and the
//! graph's declared types do not change for the caller.

use rlx_driver::Device;
use rlx_ir::{DType, Graph, Tensor};
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;

/// y = (gelu(x @ w1 + b1)) @ w2, with x: f32[16, 64].
fn mlp() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [16, 64]);
    let w1 = g.param("w1", DType::F32, [64, 128]);
    let b1 = g.param("b1", DType::F32, [128]);
    let w2 = g.param("w2", DType::F32, [128, 32]);
    let h = g.matmul(x, w1).unwrap();
    let h = g.add(h, b1).unwrap();
    let h = g.unary(rlx_ir::UnaryOp::GELU, h).unwrap();
    let y = g.matmul(h, w2).unwrap();
    g.output("y", y);
    g
}

fn rel_l2(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den.max(1e-300)).sqrt()
}

#[test]
fn f16_and_bf16_products_stay_close_to_f32() {
    let s = Session::new(Device::Cpu).unwrap();
    for (name, shape, seed) in [("w1", [64, 128], 1), ("w2", [128, 32], 2)] {
        let w = Tensor::random(DType::F32, &shape, seed);
        s.set_param(name, w);
    }
    s.set_param("b1", Tensor::random(DType::F32, &[128], 3));
    let x = Tensor::random(DType::F32, &[16, 64], 4);
    let inputs = HashMap::from([("x".to_string(), x)]);
    let full = s.compile(&mlp(), CompileOptions::default()).unwrap();
    let want = full.run(&inputs).unwrap()[0].1.to_f64_vec();
    for (low, tol) in [(DType::F16, 2e-3), (DType::BF16, 1.5e-2)] {
        let options = CompileOptions {
            precision: Some(low),
            ..CompileOptions::default()
        };
        let mixed = s.compile(&mlp(), options).unwrap();
        // the caller still binds and reads f32
        assert!(mixed
            .param_types()
            .iter()
            .all(|(_, t)| t.dtype == DType::F32));
        let out = mixed.run(&inputs).unwrap();
        assert_eq!(out[0].1.dtype(), DType::F32);
        let err = rel_l2(&out[0].1.to_f64_vec(), &want);
        assert!(err > 0.0 && err <= tol, "{low}: relative L2 {err}");
        // the products really ran low
        let variant = mixed.first_variant().unwrap();
        assert!(variant
            .graph
            .nodes()
            .iter()
            .any(|n| n.op == rlx_ir::Op::MatMul && n.ty.dtype == low));
    }
}

#[test]
fn replaced_weights_are_converted_again() {
    let s = Session::new(Device::Cpu).unwrap();
    s.set_param("w1", Tensor::random(DType::F32, &[64, 128], 1));
    s.set_param("w2", Tensor::random(DType::F32, &[128, 32], 2));
    s.set_param("b1", Tensor::random(DType::F32, &[128], 3));
    let options = CompileOptions {
        precision: Some(DType::F16),
        ..CompileOptions::default()
    };
    let c = s.compile(&mlp(), options).unwrap();
    let x = Tensor::random(DType::F32, &[16, 64], 4);
    let inputs = HashMap::from([("x".to_string(), x)]);
    let first = c.run(&inputs).unwrap()[0].1.to_f64_vec();
    assert_eq!(first, c.run(&inputs).unwrap()[0].1.to_f64_vec());
    c.set_param("w2", Tensor::full(DType::F32, &[128, 32], 0.0))
        .unwrap();
    let zeroed = c.run(&inputs).unwrap()[0].1.to_f64_vec();
    assert!(zeroed.iter().all(|&v| v == 0.0));
}

#[test]
fn precision_must_be_a_half_type() {
    let s = Session::new(Device::Cpu).unwrap();
    let options = CompileOptions {
        precision: Some(DType::I8),
        ..CompileOptions::default()
    };
    let err = s.compile(&mlp(), options).err().expect("i8 is refused");
    assert!(err.to_string().contains("f16 or bf16"), "{err}");
}

/// The same products in f16 on the CUDA device (tensor cores, f32 accumulation) against the
/// f32 CPU result; SKIPPED without a CUDA device.
#[test]
fn cuda_f16_products_match_cpu_f32() {
    let gpu = match Session::new(Device::Cuda) {
        Ok(s) => s,
        Err(e) => {
            rlx_driver::testing::skip("cuda_f16_products_match_cpu_f32", &e.to_string());
            return;
        }
    };
    let cpu = Session::new(Device::Cpu).unwrap();
    for (name, shape, seed) in [
        ("w1", vec![64, 128], 1),
        ("w2", vec![128, 32], 2),
        ("b1", vec![128], 3),
    ] {
        let w = Tensor::random(DType::F32, &shape, seed);
        cpu.set_param(name, w.clone());
        gpu.set_param(name, w);
    }
    let x = Tensor::random(DType::F32, &[16, 64], 4);
    let inputs = HashMap::from([("x".to_string(), x)]);
    let want = cpu
        .compile(&mlp(), CompileOptions::default())
        .unwrap()
        .run(&inputs)
        .unwrap()[0]
        .1
        .to_f64_vec();
    let options = CompileOptions {
        precision: Some(DType::F16),
        ..CompileOptions::default()
    };
    let got = gpu.compile(&mlp(), options).unwrap().run(&inputs).unwrap()[0]
        .1
        .to_f64_vec();
    let err = rel_l2(&got, &want);
    println!("cuda f16 mixed precision vs cpu f32: relative L2 {err:.2e}");
    assert!(err <= 2e-3, "relative L2 {err}");
}

/// A MiniLM-shaped encoder (2 layers, 64 tokens, batch 2) in f32 with its weights set on
/// `cpu`, a random input (seeded), and its f32 result on `cpu`.
fn small_encoder(
    cpu: &Session,
    seed: u64,
) -> (
    rlx_ir::sample::SampleModel,
    HashMap<String, Tensor>,
    Vec<f64>,
) {
    use rlx_ir::sample::{encoder, EncoderShape};
    let shape = EncoderShape {
        layers: 2,
        seq: 64,
        ..EncoderShape::MINILM
    };
    let model = encoder(shape, 2, DType::F32);
    for (name, t) in &model.params {
        cpu.set_param(name, (**t).clone());
    }
    let x = Tensor::random(DType::F32, &[2, shape.seq, shape.hidden], seed);
    let inputs = HashMap::from([("hidden".to_string(), x)]);
    let want = cpu
        .compile(&model.graph, CompileOptions::default())
        .unwrap()
        .run(&inputs)
        .unwrap()[0]
        .1
        .to_f64_vec();
    (model, inputs, want)
}

/// A MiniLM-shaped encoder (2 layers, 64 tokens, batch 2) in bf16 products on the CPU:
/// matmuls by a weight on AMX tiles where the CPU has them (packed from the second run on,
/// epilogues block by block), attention kept in f32, bf16 loads and stores in f32 lanes;
/// within bf16's error of the f32 run, on the first run and on the packed second one.
#[test]
fn bf16_encoder_stays_close_to_f32() {
    let s = Session::new(Device::Cpu).unwrap();
    let (model, inputs, want) = small_encoder(&s, 5);
    let options = CompileOptions {
        precision: Some(DType::BF16),
        ..CompileOptions::default()
    };
    let mixed = s.compile(&model.graph, options).unwrap();
    let first = mixed.run(&inputs).unwrap()[0].1.to_f64_vec();
    let second = mixed.run(&inputs).unwrap()[0].1.to_f64_vec();
    for (run, got) in [("first", &first), ("second", &second)] {
        assert!(
            got.iter().all(|v| v.is_finite()),
            "{run} run: non-finite output"
        );
        let err = rel_l2(got, &want);
        assert!(err > 0.0 && err <= 2e-2, "{run} run: relative L2 {err}");
    }
}

/// A MiniLM-shaped encoder (2 layers, 64 tokens, batch 2) in f16 on the CUDA device, which
/// stores activations in f16 too (norms, softmax and GELU between the products, as
/// `model.half()` does): within f16's error of the CPU's f32 run; SKIPPED without a CUDA
/// device.
#[test]
fn cuda_f16_encoder_with_f16_activations_stays_close_to_f32() {
    f16_encoder_with_f16_activations(Device::Cuda);
}

/// The same on Vulkan (wgpu), which stores activations in f16 where the adapter has
/// SHADER_F16; SKIPPED without a Vulkan adapter.
#[test]
fn vulkan_f16_encoder_stays_close_to_f32() {
    f16_encoder_with_f16_activations(Device::Vulkan);
}

fn f16_encoder_with_f16_activations(device: Device) {
    let gpu = match Session::new(device) {
        Ok(s) => s,
        Err(e) => {
            rlx_driver::testing::skip(
                &format!("{}_f16_encoder_with_f16_activations", device.name()),
                &e.to_string(),
            );
            return;
        }
    };
    let cpu = Session::new(Device::Cpu).unwrap();
    let (model, inputs, want) = small_encoder(&cpu, 6);
    for (name, t) in &model.params {
        gpu.set_param(name, (**t).clone());
    }
    let options = CompileOptions {
        precision: Some(DType::F16),
        ..CompileOptions::default()
    };
    let compiled = gpu.compile(&model.graph, options).unwrap();
    let out = compiled.run(&inputs).unwrap();
    assert_eq!(out[0].1.dtype(), DType::F32, "outputs keep their type");
    let got = out[0].1.to_f64_vec();
    assert!(got.iter().all(|v| v.is_finite()), "non-finite output");
    let err = rel_l2(&got, &want);
    println!(
        "{} f16 activations vs cpu f32: relative L2 {err:.2e}",
        device.name()
    );
    assert!(err > 0.0 && err <= 1e-2, "relative L2 {err}");
}
