//! The engine on the CPU with a random Llama folder: sequences added and stepped together
//! make the tokens each makes alone; bad requests are errors that leave the others running;
//! text streams with stop strings end where the whole text would.

use rlx_driver::Device;
use rlx_llm::{Engine, EngineSettings, Llama, LlmError, Sampling, TextStream};
use rlx_models::llama::sample::RandomLlama;

/// A random folder of a 64-token vocabulary, written under a name of its own.
fn folder(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-llm-{tag}-{}", std::process::id()));
    RandomLlama {
        vocab: 64,
        ..Default::default()
    }
    .write(&dir)
    .expect("writes");
    dir
}

fn model(tag: &str) -> Llama {
    Llama::open(&folder(tag)).expect("loads")
}

fn settings(n: usize) -> EngineSettings {
    EngineSettings {
        threads: Some(1),
        max_sequences: n,
        context: None,
        exact_quant: false,
    }
}

#[test]
fn sequences_stepped_together_match_their_single_runs() {
    let m = model("batch");
    let prompts: Vec<Vec<u32>> = vec![vec![5, 9, 11], vec![7], vec![3, 4, 5, 6, 7, 8, 9]];
    let mut alone = Vec::new();
    let mut e = Engine::new(&m, Device::Cpu, settings(3)).expect("engine");
    for p in &prompts {
        let s = Sampling {
            temperature: 0.7,
            seed: 11,
            ..Default::default()
        };
        alone.push(e.generate(p, 8, &s, &[], &mut |_| {}).expect("runs").tokens);
    }
    // joined one after another, stepped together; the second leaves early
    let s = Sampling {
        temperature: 0.7,
        seed: 11,
        ..Default::default()
    };
    let (a, fa) = e.add(&prompts[0], 8, s).expect("adds");
    let mut got = vec![vec![fa]];
    let out = e.step().expect("steps");
    got[0].push(out[0].1);
    let (b, fb) = e.add(&prompts[1], 8, s).expect("adds");
    let (c, fc) = e.add(&prompts[2], 8, s).expect("adds");
    got.push(vec![fb]);
    got.push(vec![fc]);
    assert!(!e.can_add(4), "three slots taken");
    let err = e.add(&prompts[0], 8, s).unwrap_err();
    assert!(matches!(err, LlmError::Capacity(_)), "{err}");
    for step in 0..6 {
        if step == 3 {
            e.remove(b);
        }
        for (id, t) in e.step().expect("steps") {
            let i = [a, b, c].iter().position(|x| *x == id).expect("ours");
            got[i].push(t);
        }
    }
    assert_eq!(got[0], alone[0][..8]);
    assert_eq!(got[1], alone[1][..4]);
    assert_eq!(got[2], alone[2][..7]);
    assert_eq!(e.active(), 2);
    // bad requests: errors, and the running sequences go on
    assert!(matches!(e.add(&[], 4, s), Err(LlmError::Invalid(_))));
    assert!(matches!(e.add(&[999], 4, s), Err(LlmError::Invalid(_))));
    assert!(matches!(e.add(&[3], 5000, s), Err(LlmError::Capacity(_))));
    let bad = Sampling {
        top_p: 2.0,
        ..Default::default()
    };
    assert!(matches!(e.add(&[3], 4, bad), Err(LlmError::Invalid(_))));
    assert_eq!(e.step().expect("steps").len(), 2);
}

#[test]
fn sequences_added_together_match_their_single_runs() {
    let m = model("many");
    let prompts: Vec<Vec<u32>> = vec![vec![5, 9, 11], vec![7], vec![3, 4, 5, 6, 7, 8, 9]];
    let s = Sampling::default();
    let mut e = Engine::new(&m, Device::Cpu, settings(3)).expect("engine");
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| e.generate(p, 6, &s, &[], &mut |_| {}).expect("runs").tokens)
        .collect();
    assert!(e.fits(&[8, 8, 8]) && !e.fits(&[8, 8, 8, 8]), "three slots");
    let mut requests: Vec<(&[u32], usize, Sampling)> =
        prompts.iter().map(|p| (&p[..], 6, s)).collect();
    requests.insert(1, (&[999], 6, s));
    requests.push((&[3], 6, s));
    let added = e.add_many(&requests);
    assert!(
        matches!(added[1], Err(LlmError::Invalid(_))),
        "bad token fails alone"
    );
    assert!(
        matches!(added[4], Err(LlmError::Capacity(_))),
        "a fourth sequence finds no slot"
    );
    let ids: Vec<_> = [0, 2, 3]
        .iter()
        .map(|&i| added[i].as_ref().unwrap().0)
        .collect();
    let mut got: Vec<Vec<u32>> = [0, 2, 3]
        .iter()
        .map(|&i| vec![added[i].as_ref().unwrap().1])
        .collect();
    for _ in 0..5 {
        for (id, t) in e.step().expect("steps") {
            got[ids.iter().position(|x| *x == id).expect("ours")].push(t);
        }
    }
    assert_eq!(got, alone);
    for id in ids {
        e.remove(id);
    }
    let batch = e.generate_batch(&prompts, 6, &s, &[]).expect("batch");
    assert_eq!(batch.tokens, alone);
}

#[test]
fn text_streams_hold_back_stop_strings() {
    let m = model("text");
    let tok = &m.tokenizer;
    let ids = tok.encode("w5 w9 w11 w12 w13").expect("encodes");
    let whole = tok.decode(&ids, true).expect("decodes");
    // no stop: the pieces join to the whole text
    let mut t = TextStream::new(tok, &[]);
    let mut s = String::new();
    for &id in &ids {
        s.push_str(&t.push(id).expect("pushes"));
    }
    s.push_str(&t.finish().expect("finishes"));
    assert_eq!(s, whole);
    // a stop string across two tokens: the text ends before it, nothing of it leaks
    let stop = "w11 w1".to_string();
    let mut t = TextStream::new(tok, std::slice::from_ref(&stop));
    let mut s = String::new();
    for &id in &ids {
        s.push_str(&t.push(id).expect("pushes"));
        assert!(!s.contains("w11"), "{s}");
    }
    s.push_str(&t.finish().expect("finishes"));
    assert!(t.stopped());
    assert_eq!(s, &whole[..whole.find(&stop).expect("in text")]);
}

/// Six sequences of a Q4_0 file (integer products) and of the f32 folder step as one batch:
/// every product reads its weights once for all of them, and each sequence still makes the
/// tokens it makes alone (its rows computed as a single row's are).
#[test]
fn a_batch_of_six_makes_the_tokens_each_makes_alone() {
    let dir = folder("six");
    let gguf = dir.join("q4_0.gguf");
    let folder = Llama::open(&dir).expect("loads");
    rlx_models::llama::export::export_gguf(
        &folder,
        &dir,
        &gguf,
        rlx_ir::QuantFormat::Q4_0,
        1,
        &mut |_| {},
    )
    .expect("exports");
    let quantized = Llama::open(&gguf).expect("loads");
    for m in [&quantized, &folder] {
        let prompts: Vec<Vec<u32>> = (0..6u32)
            .map(|i| (0..1 + i % 4).map(|j| (7 * i + 3 * j + 1) % 64).collect())
            .collect();
        let sampling = |i: usize| Sampling {
            temperature: if i.is_multiple_of(2) { 0.0 } else { 0.8 },
            seed: 5 + i as u64,
            ..Default::default()
        };
        let mut e = Engine::new(m, Device::Cpu, settings(6)).expect("engine");
        let alone: Vec<Vec<u32>> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let s = sampling(i);
                e.generate(p, 10, &s, &[], &mut |_| {})
                    .expect("runs")
                    .tokens
            })
            .collect();
        let requests: Vec<(&[u32], usize, Sampling)> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| (&p[..], 10, sampling(i)))
            .collect();
        let added: Vec<_> = e
            .add_many(&requests)
            .into_iter()
            .map(|r| r.expect("adds"))
            .collect();
        let mut got: Vec<Vec<u32>> = added.iter().map(|(_, t)| vec![*t]).collect();
        for _ in 0..9 {
            let out = e.step().expect("steps");
            assert_eq!(out.len(), 6);
            for (id, t) in out {
                got[added.iter().position(|(x, _)| *x == id).expect("ours")].push(t);
            }
        }
        assert_eq!(got, alone);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
