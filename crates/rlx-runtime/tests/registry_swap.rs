//! The registry as designed: a session looks its device up again at every compile, so a
//! backend registered for a real builtin (the CPU) after the session exists is the one the
//! next graph compiles with, while graphs compiled before keep the builtin. Its own test
//! binary: replacing the CPU backend must not disturb other tests.

use rlx_driver::{Availability, Device};
use rlx_ir::{DType, Graph, Op, Tensor, TensorType};
use rlx_runtime::{
    register_backend, Backend, CompileOptions, Executable, ParamStore, RuntimeError, Session,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Compiles done by [`Replacement`].
static COMPILES: AtomicUsize = AtomicUsize::new(0);

/// A CPU stand-in that counts its compiles and runs graphs on the reference interpreter,
/// adding 1000 to every output so its results cannot be mistaken for the builtin's.
struct Replacement;

struct Marked(Graph);

impl Executable for Marked {
    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &ParamStore,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError> {
        let out = rlx_interp::run_graph(&self.0, inputs, &params.snapshot()).map_err(|e| {
            RuntimeError::Backend {
                device: Device::Cpu,
                message: e.to_string(),
            }
        })?;
        Ok(out
            .into_iter()
            .map(|(n, t)| {
                let v: Vec<f32> = t.to_f64_vec().iter().map(|x| *x as f32 + 1000.0).collect();
                (n, Tensor::from_f32(t.shape(), v).expect("same size"))
            })
            .collect())
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

impl Backend for Replacement {
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn availability(&self) -> Availability {
        Availability::yes()
    }
    fn supports(&self, _op: &Op, _inputs: &[&TensorType]) -> bool {
        true
    }
    fn compile(
        &self,
        graph: &Graph,
        _options: &CompileOptions,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        COMPILES.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(Marked(graph.clone())))
    }
}

#[test]
fn a_backend_registered_after_the_session_is_used_by_its_next_compile() {
    let session = Session::new(Device::Cpu).unwrap();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3]);
    let y = g.add(x, x).unwrap();
    g.output("y", y);
    let feeds = HashMap::from([(
        "x".to_string(),
        Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0]).unwrap(),
    )]);

    let builtin = session.compile(&g, CompileOptions::default()).unwrap();
    assert_eq!(
        builtin.run(&feeds).unwrap()[0].1.to_f64_vec(),
        [2.0, 4.0, 6.0]
    );
    assert_eq!(COMPILES.load(Ordering::SeqCst), 0);

    register_backend(Device::Cpu, || Box::new(Replacement));
    let replaced = session.compile(&g, CompileOptions::default()).unwrap();
    assert_eq!(
        COMPILES.load(Ordering::SeqCst),
        1,
        "the next compile used the replacement"
    );
    assert_eq!(
        replaced.run(&feeds).unwrap()[0].1.to_f64_vec(),
        [1002.0, 1004.0, 1006.0]
    );
    // the graph compiled before keeps the builtin; a clone of the session sees the swap too
    assert_eq!(
        builtin.run(&feeds).unwrap()[0].1.to_f64_vec(),
        [2.0, 4.0, 6.0]
    );
    session
        .clone()
        .compile(&g, CompileOptions::default())
        .unwrap();
    assert_eq!(COMPILES.load(Ordering::SeqCst), 2);
}
