//! `CudaProgram::run_bound`: device pointers as inputs and outputs, against host runs of the
//! same program (CUDA graphs on, so bound runs replay the captured graph too). Each test
//! prints `SKIPPED: <reason>` and returns when no CUDA device is present.

mod support;

use rlx_cuda::device::CudaDevice;
use rlx_cuda::memory::{DeviceBuffer, DeviceMemory};
use rlx_cuda::weights::{tensor_bytes, WeightCache};
use rlx_cuda::{BoundInput, CudaOptions, CudaProgram};
use rlx_ir::{DType, Graph, Tensor, TensorData, UnaryOp};
use std::collections::HashMap;
use std::sync::Arc;

fn device_ready(test: &str) -> bool {
    let a = rlx_cuda::probe::availability();
    if !a.available {
        rlx_driver::testing::skip(
            test,
            &format!("no CUDA device: {}", a.reason.unwrap_or_default()),
        );
    }
    a.available
}

/// y = gelu(x @ w), z = x + 1; x: f32[16, 64], w: f32[64, 64] (y feeds back as x).
fn model() -> (Graph, HashMap<String, Arc<Tensor>>) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [16, 64]);
    let w = g.param("w", DType::F32, [64, 64]);
    let m = g.matmul(x, w).unwrap();
    let y = g.unary(UnaryOp::GELU, m).unwrap();
    let one = g.constant(Tensor::scalar(DType::F32, 1.0));
    let z = g.add(x, one).unwrap();
    g.output("y", y);
    g.output("z", z);
    let w = Tensor::random(DType::F32, &[64, 64], 7);
    (g, HashMap::from([("w".to_string(), Arc::new(w))]))
}

fn compile() -> (CudaProgram, HashMap<String, Arc<Tensor>>) {
    let (g, weights) = model();
    let program = support::lower_for_cuda(&g).unwrap();
    let compiled =
        CudaProgram::compile(program, &WeightCache::new(), &CudaOptions::default()).unwrap();
    (compiled, weights)
}

fn upload(t: &Tensor) -> DeviceBuffer {
    let mem = DeviceMemory::get().unwrap();
    let b = mem.alloc(t.size_bytes()).unwrap();
    let device = CudaDevice::get().unwrap();
    let _queue = device.queue();
    device.bind().unwrap();
    device.upload(b.ptr(), tensor_bytes(t)).unwrap();
    device.sync().unwrap();
    b
}

fn download(b: &DeviceBuffer, like: &Tensor) -> Tensor {
    let device = CudaDevice::get().unwrap();
    let mut bytes = vec![0u8; like.size_bytes()];
    let _queue = device.queue();
    device.bind().unwrap();
    device.download(&mut bytes, b.ptr()).unwrap();
    device.sync().unwrap();
    Tensor::new(
        like.shape().to_vec(),
        TensorData::from_le_bytes(like.dtype(), &bytes).unwrap(),
    )
    .unwrap()
}

fn device_input<'a>(b: &DeviceBuffer, shape: &'a [usize]) -> BoundInput<'a> {
    BoundInput::Device {
        ptr: b.ptr(),
        dtype: DType::F32,
        shape,
    }
}

#[test]
fn bound_runs_equal_host_runs_in_a_loop() {
    if !device_ready("bound_runs_equal_host_runs_in_a_loop") {
        return;
    }
    let (p, weights) = compile();
    let shape = [16usize, 64];
    let y = DeviceMemory::get().unwrap().alloc(16 * 64 * 4).unwrap();
    let z = DeviceMemory::get().unwrap().alloc(16 * 64 * 4).unwrap();
    for i in 0..10 {
        let x = Tensor::random(DType::F32, &shape, i);
        let want: HashMap<String, Tensor> = p
            .run(&HashMap::from([("x".to_string(), x.clone())]), &weights)
            .unwrap()
            .into_iter()
            .collect();
        let xd = upload(&x);
        let inputs = HashMap::from([("x".to_string(), device_input(&xd, &shape))]);
        p.run_bound(
            &inputs,
            &weights,
            &[("y".into(), y.ptr()), ("z".into(), z.ptr())],
        )
        .unwrap();
        assert_eq!(download(&y, &want["y"]), want["y"], "run {i}: y");
        assert_eq!(download(&z, &want["z"]), want["z"], "run {i}: z");
        // a host input through the same path
        let inputs = HashMap::from([("x".to_string(), BoundInput::Host(&x))]);
        p.run_bound(&inputs, &weights, &[("y".into(), y.ptr())])
            .unwrap();
        assert_eq!(
            download(&y, &want["y"]),
            want["y"],
            "run {i}: y from a host input"
        );
    }
    assert!(p.uses_graph(), "bound runs replay the captured graph");
}

#[test]
fn outputs_feed_the_next_run() {
    if !device_ready("outputs_feed_the_next_run") {
        return;
    }
    let (p, weights) = compile();
    let shape = [16usize, 64];
    let mut x = Tensor::random(DType::F32, &shape, 42);
    let mut current = upload(&x);
    for i in 0..5 {
        let next = DeviceMemory::get().unwrap().alloc(16 * 64 * 4).unwrap();
        let inputs = HashMap::from([("x".to_string(), device_input(&current, &shape))]);
        p.run_bound(&inputs, &weights, &[("y".into(), next.ptr())])
            .unwrap();
        x = p
            .run(&HashMap::from([("x".to_string(), x)]), &weights)
            .unwrap()
            .remove(0)
            .1;
        assert_eq!(download(&next, &x), x, "step {i}");
        current = next;
    }
}

#[test]
fn bad_bindings_are_errors() {
    if !device_ready("bad_bindings_are_errors") {
        return;
    }
    let (p, weights) = compile();
    let x = upload(&Tensor::random(DType::F32, &[16, 64], 1));
    let out = DeviceMemory::get().unwrap().alloc(16 * 64 * 4).unwrap();
    let wrong = [16usize, 63];
    let inputs = HashMap::from([("x".to_string(), device_input(&x, &wrong))]);
    let e = p
        .run_bound(&inputs, &weights, &[("y".into(), out.ptr())])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("x") && e.contains("[16, 63]") && e.contains("f32[16,64]"),
        "{e}"
    );
    let good = [16usize, 64];
    let inputs = HashMap::from([("x".to_string(), device_input(&x, &good))]);
    let e = p
        .run_bound(&inputs, &weights, &[("nope".into(), out.ptr())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope"), "{e}");
    let e = p
        .run_bound(&HashMap::new(), &weights, &[("y".into(), out.ptr())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing"), "{e}");
    // still good afterwards
    p.run_bound(&inputs, &weights, &[("y".into(), out.ptr())])
        .unwrap();
}
