//! The registry: builtins, replacement by a custom backend, seams, and unsupported-op
//! reporting through a fake backend. One process, so registrations here touch only
//! devices no other test in this file checks.

use rlx_driver::{Availability, Device};
use rlx_ir::{DType, Graph, Op, Tensor, TensorType, UnaryOp};
use rlx_runtime::{
    backend_for, register_backend, registered_devices, Backend, CompileOptions, Executable,
    ParamStore, RuntimeError, Session,
};
use std::collections::HashMap;

#[test]
fn default_build_registers_every_device_in_order() {
    let devices = registered_devices();
    assert_eq!(devices, Device::ALL.to_vec());
    let cpu = backend_for(Device::Cpu).unwrap();
    assert!(cpu.availability().available);
}

#[test]
fn seams_are_unavailable_with_a_reason_and_refuse_to_compile() {
    // Cpu, CUDA and the wgpu devices are real backends (a machine may have a GPU, or a
    // software Vulkan or GL adapter); Egpu is replaced by a test backend below.
    for d in Device::ALL.into_iter().filter(|d| {
        !matches!(
            d,
            Device::Cpu
                | Device::Cuda
                | Device::Egpu
                | Device::Gpu
                | Device::Vulkan
                | Device::OpenGl
                | Device::WebGpu
        )
    }) {
        let b = backend_for(d).unwrap();
        let a = b.availability();
        assert!(!a.available, "{d} should be a seam");
        let reason = a.reason.unwrap();
        assert!(reason.contains(d.name()), "{d}: {reason}");
        assert!(!b.supports(&Op::Unary(UnaryOp::Exp), &[]));
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [2]);
        g.output("y", x);
        let err = b
            .compile(&g, &CompileOptions::default())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("not available"), "{err}");
        let err = Session::new(d).err().unwrap().to_string();
        assert!(err.contains(d.name()) && err.contains("no "), "{err}");
    }
}

/// A backend that runs only add and mul, through the CPU interpreter.
struct AddMulOnly;

struct Interp(Graph);

impl Executable for Interp {
    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &ParamStore,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError> {
        rlx_cpu::run_graph(&self.0, inputs, &params.snapshot()).map_err(|e| RuntimeError::Backend {
            device: Device::Egpu,
            message: e.to_string(),
        })
    }
    fn kernel_count(&self) -> usize {
        self.0.nodes().len()
    }
    fn arena_bytes(&self) -> usize {
        0
    }
    fn dump(&self) -> String {
        self.0.to_string()
    }
}

impl Backend for AddMulOnly {
    fn device(&self) -> Device {
        Device::Egpu
    }
    fn availability(&self) -> Availability {
        Availability::yes()
    }
    fn supports(&self, op: &Op, _inputs: &[&TensorType]) -> bool {
        matches!(
            op,
            Op::Binary(rlx_ir::BinaryOp::Add | rlx_ir::BinaryOp::Mul) | Op::Constant(_)
        )
    }
    fn compile(
        &self,
        graph: &Graph,
        _options: &CompileOptions,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        Ok(Box::new(Interp(graph.clone())))
    }
}

#[test]
fn custom_backend_replaces_builtin_and_unsupported_nodes_are_listed_at_once() {
    assert!(!backend_for(Device::Egpu).unwrap().availability().available);
    register_backend(Device::Egpu, || Box::new(AddMulOnly));
    assert!(backend_for(Device::Egpu).unwrap().availability().available);
    let session = Session::new(Device::Egpu).unwrap();

    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4]);
    let y = g.add(x, x).unwrap();
    let y = g.mul(y, x).unwrap();
    g.output("y", y);
    let c = session.compile(&g, CompileOptions::default()).unwrap();
    let xin = Tensor::random(DType::F32, &[4], 3);
    let out = c
        .run(&HashMap::from([("x".to_string(), xin.clone())]))
        .unwrap();
    let want: Vec<f64> = xin.to_f64_vec().iter().map(|v| (v + v) * v).collect();
    let got = out[0].1.to_f64_vec();
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() < 1e-6);
    }

    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4]);
    let a = g.unary(UnaryOp::Exp, x).unwrap();
    g.set_name(a, "my_exp");
    let b = g.unary(UnaryOp::Cos, a).unwrap();
    g.set_name(b, "my_cos");
    g.output("y", b);
    let err = session
        .compile(&g, CompileOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("my_exp") && err.contains("my_cos"), "{err}");
    assert!(err.contains("egpu"), "{err}");
}

/// `is_available` says why a device cannot run graphs, and a seam still gives a dispatch
/// report (every node unsupported, with the reason) without a session.
#[test]
fn availability_and_the_report_of_a_seam() {
    assert!(rlx_runtime::is_available(Device::Cpu).is_ok());
    let err = rlx_runtime::is_available(Device::Xdna)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("xdna") && err.contains("not available"),
        "{err}"
    );
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4]);
    let y = g.unary(UnaryOp::Exp, x).unwrap();
    let y = g.add(y, x).unwrap();
    g.output("y", y);
    let report =
        rlx_runtime::dispatch_report(Device::Xdna, &g, &CompileOptions::default()).unwrap();
    assert_eq!(report.count(rlx_opt::How::Unsupported), 2, "{report}");
    assert_eq!(report.count(rlx_opt::How::Native), 0, "{report}");
    let cpu = rlx_runtime::dispatch_report(Device::Cpu, &g, &CompileOptions::default()).unwrap();
    assert_eq!(cpu.count(rlx_opt::How::Unsupported), 0, "{cpu}");
}
