//! Every device folds constants with the validation interpreter: a test backend that runs
//! nothing but constants (and does not implement `const_eval`) still compiles a graph whose
//! only arithmetic is on constants, because the session folds it first; the seams fold the
//! same way. One process, so the registration here touches only this file's device.

use rlx_driver::{Availability, Device};
use rlx_ir::{BinaryOp, DType, Graph, Op, Tensor, TensorType};
use rlx_runtime::{
    backend_for, register_backend, Backend, CompileOptions, Executable, ParamStore, RuntimeError,
    Session,
};
use std::collections::HashMap;

/// A backend that supports constants only and leaves `const_eval` to the trait's default.
struct ConstantsOnly;

/// Runs the compiled graph on the interpreter.
struct Interp(Graph);

impl Executable for Interp {
    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &ParamStore,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError> {
        rlx_interp::run_graph(&self.0, inputs, &params.snapshot()).map_err(|e| {
            RuntimeError::Backend {
                device: Device::Tpu,
                message: e.to_string(),
            }
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

impl Backend for ConstantsOnly {
    fn device(&self) -> Device {
        Device::Tpu
    }
    fn availability(&self) -> Availability {
        Availability::yes()
    }
    fn supports(&self, op: &Op, _inputs: &[&TensorType]) -> bool {
        matches!(op, Op::Constant(_))
    }
    fn compile(
        &self,
        graph: &Graph,
        _options: &CompileOptions,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        Ok(Box::new(Interp(graph.clone())))
    }
}

/// y = (a + b) * a on constants a = [1, 2, 3], b = [10, 20, 30].
fn constant_graph() -> Graph {
    let mut g = Graph::new();
    let a = g.constant(Tensor::from_f64(DType::F32, &[3], &[1.0, 2.0, 3.0]).unwrap());
    let b = g.constant(Tensor::from_f64(DType::F32, &[3], &[10.0, 20.0, 30.0]).unwrap());
    let s = g.binary(BinaryOp::Add, a, b).unwrap();
    let y = g.binary(BinaryOp::Mul, s, a).unwrap();
    g.output("y", y);
    g
}

#[test]
fn a_non_cpu_backend_gets_constant_subgraphs_folded() {
    register_backend(Device::Tpu, || Box::new(ConstantsOnly));
    let session = Session::new(Device::Tpu).unwrap();
    let compiled = session
        .compile(&constant_graph(), CompileOptions::default())
        .unwrap();
    let variant = compiled.first_variant().unwrap();
    let ops: Vec<&str> = variant.graph.nodes().iter().map(|n| n.op.name()).collect();
    assert_eq!(ops, ["constant"], "{}", variant.graph);
    let out = compiled.run(&HashMap::new()).unwrap();
    assert_eq!(out[0].1.to_f64_vec(), [11.0, 44.0, 99.0]);
}

#[test]
fn seams_fold_with_the_interpreter_too() {
    let seam = backend_for(Device::Rocm).unwrap();
    assert!(!seam.availability().available);
    let a = Tensor::from_f64(DType::F32, &[2], &[1.5, -2.0]).unwrap();
    let b = Tensor::from_f64(DType::F32, &[2], &[0.5, 4.0]).unwrap();
    let add = Op::Binary(BinaryOp::Add);
    let folded = seam.const_eval(&add, &[&a, &b]).unwrap();
    assert_eq!(folded.to_f64_vec(), [2.0, 2.0]);
    assert!(seam.const_eval(&add, &[&a]).is_none(), "wrong arity");
}
