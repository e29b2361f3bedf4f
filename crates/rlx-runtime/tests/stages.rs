//! A `DynamicGraph` that runs in stages on the CPU, with a specialiser that knows nothing of
//! ONNX: stage 1 doubles `x`; a host step keeps its positive elements (a data-dependent
//! shape); stage 2 adds one to them. Each stage is compiled once per signature, carried
//! values are handed to the next stage, and host errors come back as `RuntimeError::Host`.

use rlx_driver::Device;
use rlx_ir::{DType, Dim, Graph, Shape, Tensor, TensorType};
use rlx_runtime::{
    BoxError, CompileOptions, DynamicGraph, HostStep, RuntimeError, Session, Specialised,
};
use std::collections::HashMap;
use std::sync::Arc;

fn staged() -> DynamicGraph {
    let build = |dims: &rlx_runtime::Bindings,
                 carried: &[(String, TensorType)]|
     -> Result<Specialised, BoxError> {
        let n = dims["n"];
        let mut g = Graph::new();
        let Some((_, kept)) = carried.iter().find(|(name, _)| name == "kept") else {
            let x = g.input("x", DType::F32, [n]);
            let y = g.add(x, x)?;
            g.output("y", y);
            let then: HostStep = Arc::new(
                |_inputs: &HashMap<String, Tensor>,
                 carried: &mut HashMap<String, Tensor>|
                 -> Result<(), BoxError> {
                    let y = carried.get("y").ok_or("no y")?;
                    if y.numel() == 0 {
                        return Err("nothing to keep".into());
                    }
                    let v: Vec<f64> = y.to_f64_vec().into_iter().filter(|&v| v > 0.0).collect();
                    carried.insert("kept".into(), Tensor::from_f64(DType::F32, &[v.len()], &v)?);
                    Ok(())
                },
            );
            return Ok(Specialised {
                graph: g,
                params: vec![],
                then: Some(then),
            });
        };
        let k = g.input("kept", DType::F32, kept.shape.clone());
        let one = g.constant(Tensor::scalar(DType::F32, 1.0));
        let z = g.add(k, one)?;
        g.output("z", z);
        Ok(Specialised {
            graph: g,
            params: vec![],
            then: None,
        })
    };
    let session = Session::new(Device::Cpu).unwrap();
    let inputs = vec![(
        "x".to_string(),
        TensorType::new(DType::F32, Shape(vec![Dim::sym("n")])),
    )];
    session.dynamic(inputs, Box::new(build), CompileOptions::default())
}

fn run(m: &DynamicGraph, x: &[f64]) -> Result<Vec<f64>, RuntimeError> {
    let x = Tensor::from_f64(DType::F32, &[x.len()], x).unwrap();
    let outs = m.run(&HashMap::from([("x".to_string(), x)]))?;
    assert_eq!(outs.len(), 1);
    assert_eq!(outs[0].0, "z");
    Ok(outs[0].1.to_f64_vec())
}

#[test]
fn stages_run_in_order_and_compile_once_per_signature() {
    let m = staged();
    assert_eq!(run(&m, &[1.0, -2.0, 3.0]).unwrap(), vec![3.0, 7.0]);
    assert_eq!(m.compiles(), 2);
    assert_eq!(run(&m, &[-1.0, 2.0, 0.5]).unwrap(), vec![5.0, 2.0]);
    assert_eq!(m.compiles(), 2, "same sizes, same kept count");
    assert_eq!(run(&m, &[4.0, 2.0, 1.0]).unwrap(), vec![9.0, 5.0, 3.0]);
    assert_eq!(
        m.compiles(),
        3,
        "a new kept count compiles the second stage only"
    );
    assert_eq!(m.cached().len(), 3);
    assert!(m.total_compile_ms() >= m.last_compile_ms().unwrap());
    // the first stage alone is not the model
    let e = m.compiled(
        &m.bind(&HashMap::from([(
            "x".to_string(),
            Tensor::full(DType::F32, &[3], 1.0),
        )]))
        .unwrap(),
    );
    assert!(matches!(e, Err(RuntimeError::Specialise { .. })));
}

#[test]
fn a_failing_host_step_is_an_error_naming_the_sizes() {
    let m = staged();
    let e = run(&m, &[]).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, RuntimeError::Host { .. }), "{msg}");
    assert!(
        msg.contains("n=0") && msg.contains("nothing to keep"),
        "{msg}"
    );
}
