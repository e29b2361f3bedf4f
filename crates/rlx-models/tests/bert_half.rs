//! BERT with half-precision activations (`rlx_opt::autocast_all`, what CUDA runs under
//! `--precision f16`) against the same graph in f32, both on the reference interpreter: a
//! padded batch (the additive mask's `f32::MIN` must not turn into NaN) stays within f16's
//! error for both outputs.

use rlx_ir::{DType, Op, Tensor, TensorType};
use rlx_models::bert::{self, BertOutputs};
use rlx_models::{BertConfig, Encoded};
use std::collections::HashMap;
use std::sync::Arc;

fn rel_l2(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den).sqrt()
}

#[test]
fn half_activations_stay_close_to_f32_on_a_padded_batch() {
    let cfg: BertConfig = serde_json::from_str(
        r#"{"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 64,
            "max_position_embeddings": 16, "layer_norm_eps": 1e-12}"#,
    )
    .unwrap();
    let both = BertOutputs {
        sentence_embedding: true,
        last_hidden_state: true,
    };
    let graph = bert::graph::build(&cfg, both).unwrap();
    let params: HashMap<String, Arc<Tensor>> = bert::params::specs(&cfg)
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let t = Tensor::random(DType::F32, &s.shape, 100 + i as u64);
            (s.name.clone(), Arc::new(t))
        })
        .collect();
    // two texts of 9 and 4 tokens, padded to 9
    let enc = Encoded {
        ids: vec![vec![3, 7, 1, 9, 22, 41, 5, 8, 2], vec![4, 11, 30, 2]],
        type_ids: vec![vec![0; 9], vec![0; 4]],
        pad_id: 0,
        pad_type_id: 0,
    };
    let inputs = bert::inputs(&enc);
    let bindings = HashMap::from([("batch".to_string(), 2), ("seq".to_string(), 9)]);
    let graph = graph.bind(&bindings).unwrap();
    let every = |_: &Op, _: bool| true;
    let runs = |_: &Op, _: &[&TensorType]| true;
    let (half, report) = rlx_opt::autocast_all(&graph, DType::F16, &every, &runs).unwrap();
    // q/k/v, attention, output and two FFN products a layer
    assert_eq!(report.products, 5 * cfg.num_hidden_layers);
    let low_params: HashMap<String, Arc<Tensor>> = params
        .iter()
        .map(|(n, t)| {
            let t = if report.params.contains(n) {
                t.cast(DType::F16)
            } else {
                (**t).clone()
            };
            (n.clone(), Arc::new(t))
        })
        .collect();
    let want = rlx_interp::run_graph(&graph, &inputs, &params).unwrap();
    let got = rlx_interp::run_graph(&half, &inputs, &low_params).unwrap();
    for ((name, w), (_, g)) in want.iter().zip(&got) {
        assert_eq!(g.dtype(), DType::F32, "{name} keeps its type");
        let (w, g) = (w.to_f64_vec(), g.to_f64_vec());
        assert!(g.iter().all(|v| v.is_finite()), "{name}: non-finite values");
        let err = rel_l2(&g, &w);
        println!("{name}: relative L2 {err:.2e}");
        assert!(err > 0.0 && err <= 1e-2, "{name}: relative L2 {err}");
    }
}
