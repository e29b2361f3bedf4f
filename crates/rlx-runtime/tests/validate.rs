//! The validation layer: every node of a compiled graph checked against the CPU interpreter
//! with the device's operands. A backend that gets one op wrong (registered for a seam
//! device in this test process) is caught at that node and no other.

use rlx_driver::{Availability, Device};
use rlx_ir::{DType, Graph, Node, Op, ReduceOp, Tensor, TensorType, UnaryOp};
use rlx_runtime::{
    backend_for, register_backend, Backend, CompileOptions, Executable, RuntimeError, Session,
};
use std::collections::HashMap;

/// s = sum(exp(x @ w + b) * 0.5, axis 1) with x: f32[4, 8], w: f32[8, 6], b: f32[6].
fn graph() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 8]);
    let w = g.param("w", DType::F32, [8, 6]);
    let b = g.param("b", DType::F32, [6]);
    let h = g.matmul(x, w).unwrap();
    let h = g.add(h, b).unwrap();
    let e = g.unary(UnaryOp::Exp, h).unwrap();
    let half = g.scalar(DType::F32, 0.5);
    let m = g.mul(e, half).unwrap();
    let s = g.reduce(ReduceOp::Sum, m, &[1], false).unwrap();
    g.output("s", s);
    g
}

fn session(device: Device) -> Session {
    let s = Session::new(device).expect("session");
    s.set_param("w", Tensor::random(DType::F32, &[8, 6], 1));
    s.set_param("b", Tensor::random(DType::F32, &[6], 2));
    s
}

fn inputs() -> HashMap<String, Tensor> {
    HashMap::from([("x".to_string(), Tensor::random(DType::F32, &[4, 8], 3))])
}

#[test]
fn every_node_on_the_cpu_agrees_with_the_interpreter() {
    let compiled = session(Device::Cpu)
        .compile(&graph(), CompileOptions::default())
        .unwrap();
    let v = compiled.validate(&inputs()).unwrap();
    assert!(
        v.checks.len() >= 4,
        "matmul, add, exp, mul, sum: {:?}",
        v.checks
    );
    assert!(v.first_divergence().is_none(), "{:?}", v.first_divergence());
    assert!(v.unchecked.is_empty(), "{:?}", v.unchecked);
    let worst = v.worst().unwrap();
    assert!(worst.rel_err < 1e-5, "{worst}");

    // the option checks every run and returns the normal outputs
    let checked = session(Device::Cpu)
        .compile(
            &graph(),
            CompileOptions {
                validate: true,
                ..CompileOptions::default()
            },
        )
        .unwrap();
    let a = checked.run(&inputs()).unwrap();
    let b = compiled.run(&inputs()).unwrap();
    assert_eq!(a, b);
}

/// The CPU backend with a wrong exp kernel: every exp node computes a sigmoid instead.
struct WrongExp(Box<dyn Backend>);

impl Backend for WrongExp {
    fn device(&self) -> Device {
        Device::Xdna
    }
    fn availability(&self) -> Availability {
        Availability::yes()
    }
    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool {
        self.0.supports(op, inputs)
    }
    fn compile(
        &self,
        graph: &Graph,
        options: &CompileOptions,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        let mut wrong = Graph::new();
        for node in graph.nodes() {
            let mut node: Node = node.clone();
            if node.op == Op::Unary(UnaryOp::Exp) {
                node.op = Op::Unary(UnaryOp::Sigmoid);
            }
            wrong.push_node(node);
        }
        for (name, id) in graph.outputs() {
            wrong.output(name, *id);
        }
        self.0.compile(&wrong, options)
    }
}

#[test]
fn a_wrong_kernel_is_named_with_its_operands() {
    register_backend(Device::Xdna, || {
        Box::new(WrongExp(backend_for(Device::Cpu).expect("the cpu backend")))
    });
    let compiled = session(Device::Xdna)
        .compile(&graph(), CompileOptions::default())
        .unwrap();
    let v = compiled.validate(&inputs()).unwrap();
    let bad: Vec<_> = v.checks.iter().filter(|c| !c.passed()).collect();
    assert_eq!(bad.len(), 1, "only the exp node diverges: {bad:?}");
    let first = v.first_divergence().unwrap();
    assert_eq!(first.op, "exp");
    assert_eq!(first.ty, "f32[4,6]");
    assert!(first.max_abs.0 > 0.1, "{first}");
    assert_eq!(first.operands.len(), 1);
    assert!(first.operands[0].contains("f32[4,6] from node"), "{first}");

    // with the option on, a run fails naming the node
    let checked = session(Device::Xdna)
        .compile(
            &graph(),
            CompileOptions {
                validate: true,
                ..CompileOptions::default()
            },
        )
        .unwrap();
    let err = checked.run(&inputs()).unwrap_err().to_string();
    assert!(
        err.starts_with("validation on xdna: node") && err.contains("(exp, f32[4,6])"),
        "{err}"
    );
}
