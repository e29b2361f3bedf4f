//! Composite activations on the CPU: those with a native form there run as one op, the
//! others are expanded into primitives by legalization; both match the interpreter.

use rlx_driver::Device;
use rlx_ir::{DType, Graph, Op, Tensor, UnaryOp};
use rlx_opt::How;
use rlx_runtime::{CompileOptions, Session};
use std::collections::{BTreeMap, HashMap};

/// `c(2 x)` over f32[64, 37]: x spans about [-2, 2], where no composite is 0.
fn graph(c: UnaryOp) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [64, 37]);
    let two = g.scalar(DType::F32, 2.0);
    let x = g.mul(x, two).unwrap();
    let y = g.unary(c, x).unwrap();
    g.output("y", y);
    g
}

#[test]
fn every_composite_matches_the_interpreter_native_or_expanded() {
    let s = Session::new(Device::Cpu).unwrap();
    let composites = UnaryOp::ALL
        .into_iter()
        .filter(|u| matches!(u, UnaryOp::Composite(_)));
    let mut n_expanded = 0;
    for c in composites {
        let g = graph(c);
        let compiled = s.compile(&g, CompileOptions::default()).unwrap();
        let variant = compiled.variant(&BTreeMap::new()).unwrap();
        let native = rlx_cpu::supports(&Op::Unary(c));
        let entry = variant.report.entries.iter().find(|e| e.op == c.name());
        let how = entry.map(|e| e.how);
        assert_eq!(
            how,
            Some(if native { How::Native } else { How::Decomposed })
        );
        n_expanded += usize::from(!native);
        let kept = variant.graph.nodes().iter().any(|n| n.op == Op::Unary(c));
        assert_eq!(kept, native, "{}\n{}", c.name(), variant.graph);

        let x = Tensor::random(DType::F32, &[64, 37], 29);
        let inputs = HashMap::from([("x".to_string(), x)]);
        let want = rlx_cpu::run_graph(&g, &inputs, &HashMap::new()).unwrap();
        let got = compiled.run(&inputs).unwrap();
        let (want, got) = (want[0].1.to_f64_vec(), got[0].1.to_f64_vec());
        assert!(want.iter().all(|&v| v != 0.0), "{}: zeros", c.name());
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 2e-6 * (1.0 + w.abs()),
                "{}: {g} vs {w}",
                c.name()
            );
        }
    }
    assert!(
        n_expanded >= 5,
        "the CPU should expand the composites it has no form for"
    );
}
