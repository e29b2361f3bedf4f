//! The host sampler: greedy, top-k, min-p, top-p and the repetition penalty keep exactly the
//! tokens they promise, and a seed reproduces its draws.

use rlx_ir::SplitMix64;
use rlx_models::llama::{sample_with_history, Sampling};

fn draws(logits: &[f32], s: &Sampling, history: &[u32], n: usize) -> Vec<u32> {
    let mut rng = SplitMix64(s.seed);
    (0..n)
        .map(|_| sample_with_history(logits, s, &mut rng, history))
        .collect()
}

#[test]
fn settings_keep_the_tokens_they_promise() {
    // probabilities at T = 1 fall by e per token: 0 is the most likely
    let logits: Vec<f32> = (0..10).map(|i| -(i as f32)).collect();
    let greedy = Sampling::default();
    assert_eq!(draws(&logits, &greedy, &[], 3), vec![0, 0, 0]);
    let hot = Sampling {
        temperature: 5.0,
        seed: 9,
        ..Sampling::default()
    };
    let all = draws(&logits, &hot, &[], 400);
    assert!(
        all.iter().any(|&t| t >= 5),
        "a hot sampler reaches the tail"
    );
    assert_eq!(all, draws(&logits, &hot, &[], 400), "the seed reproduces");
    let top_k = Sampling { top_k: 3, ..hot };
    assert!(draws(&logits, &top_k, &[], 400).iter().all(|&t| t < 3));
    // min_p 0.5 at T = 5: p_i / p_0 = exp(-i / 5) >= 0.5 keeps i <= 3
    let min_p = Sampling { min_p: 0.5, ..hot };
    let d = draws(&logits, &min_p, &[], 400);
    assert!(d.iter().all(|&t| t <= 3) && d.contains(&3), "{d:?}");
    let top_p = Sampling { top_p: 0.0, ..hot };
    assert!(draws(&logits, &top_p, &[], 50).iter().all(|&t| t == 0));
    // the penalty divides token 0's positive logit and multiplies token 1's negative one
    let l = [2.0f32, -0.5, 1.5];
    let pen = Sampling {
        repetition_penalty: 2.0,
        ..greedy
    };
    assert_eq!(draws(&l, &pen, &[], 1), vec![0]);
    assert_eq!(draws(&l, &pen, &[0], 1), vec![2], "2.0 / 2 < 1.5");
    assert!(Sampling {
        top_p: 1.5,
        ..greedy
    }
    .validate()
    .is_err());
    assert!(Sampling {
        min_p: -0.1,
        ..greedy
    }
    .validate()
    .is_err());
    assert!(Sampling {
        repetition_penalty: 0.0,
        ..greedy
    }
    .validate()
    .is_err());
    assert!(Sampling {
        temperature: f64::NAN,
        ..greedy
    }
    .validate()
    .is_err());
    assert!(greedy.is_plain() && hot.is_plain() && !top_k.is_plain() && !pen.is_plain());
}
