//! Picking the next token from logits on the host: greedy, temperature, top-k, top-p, min-p and the repetition penalty.

use rlx_ir::SplitMix64;

/// How to pick the next token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0 means greedy (argmax)
    pub temperature: f64,
    /// nucleus sampling mass (1 keeps every token)
    pub top_p: f64,
    /// keep only the `top_k` most likely tokens (0 keeps every token)
    pub top_k: usize,
    /// drop tokens less likely than `min_p` times the most likely one (0 keeps every token)
    pub min_p: f64,
    /// divide positive logits (multiply negative ones) of tokens already in the sequence by
    /// this (1 is off)
    pub repetition_penalty: f64,
    /// RNG seed
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }
}

impl Sampling {
    /// True when only a temperature (or greedy) is asked for: what a device can sample
    /// without sorting (argmax of logits / T plus Gumbel noise).
    pub fn is_plain(&self) -> bool {
        self.top_p >= 1.0 && self.top_k == 0 && self.min_p <= 0.0 && self.repetition_penalty == 1.0
    }

    /// Checks the ranges: temperature >= 0, top_p and min_p in [0, 1], penalty > 0.
    ///
    /// # Errors
    /// The first setting out of range, named.
    pub fn validate(&self) -> Result<(), String> {
        if self.temperature.is_nan() || self.temperature < 0.0 {
            return Err(format!("temperature {} must be >= 0", self.temperature));
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return Err(format!("top_p {} must be in [0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p {} must be in [0, 1]", self.min_p));
        }
        if self.repetition_penalty.is_nan() || self.repetition_penalty <= 0.0 {
            return Err(format!(
                "repetition_penalty {} must be > 0",
                self.repetition_penalty
            ));
        }
        Ok(())
    }
}

/// Picks a token from logits: argmax at temperature 0 (first on ties), else softmax at the
/// temperature restricted to the smallest set of tokens whose mass reaches `top_p`.
pub fn sample(logits: &[f32], s: &Sampling, rng: &mut SplitMix64) -> u32 {
    sample_with_history(logits, s, rng, &[])
}

/// [`sample`] with the tokens of the sequence so far (for the repetition penalty); applies,
/// in order, the penalty, greedy at temperature 0, then temperature, top-k, min-p and
/// top-p ([`kept_tokens`]), and draws one of the tokens kept.
pub fn sample_with_history(
    logits: &[f32],
    s: &Sampling,
    rng: &mut SplitMix64,
    history: &[u32],
) -> u32 {
    let kept = kept_tokens(logits, s, history);
    if s.temperature <= 0.0 || logits.is_empty() {
        return kept[0].1;
    }
    let mass: f64 = kept.iter().map(|p| p.0).sum();
    let mut r = rng.next_f64() * mass;
    for p in &kept {
        r -= p.0;
        if r <= 0.0 {
            return p.1;
        }
    }
    kept[kept.len() - 1].1
}

/// The tokens [`sample_with_history`] draws from, most likely first, with their
/// unnormalised weights: the one most likely token at temperature 0 (or for no logits,
/// token 0), else what temperature, top-k, min-p and top-p keep after the repetition
/// penalty over `history`. Never empty.
pub fn kept_tokens(logits: &[f32], s: &Sampling, history: &[u32]) -> Vec<(f64, u32)> {
    let penalized: Vec<f32>;
    let logits = if s.repetition_penalty != 1.0 && !history.is_empty() {
        let mut v = logits.to_vec();
        let p = s.repetition_penalty as f32;
        let mut seen = history.to_vec();
        seen.sort_unstable();
        seen.dedup();
        for &t in &seen {
            if let Some(x) = v.get_mut(t as usize) {
                *x = if *x > 0.0 { *x / p } else { *x * p };
            }
        }
        penalized = v;
        &penalized[..]
    } else {
        logits
    };
    if s.temperature <= 0.0 || logits.is_empty() {
        let mut best = 0;
        for (i, &v) in logits.iter().enumerate() {
            if v > logits[best] {
                best = i;
            }
        }
        return vec![(1.0, best as u32)];
    }
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let mut probs: Vec<(f64, u32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &v)| (((v as f64 - max) / s.temperature).exp(), i as u32))
        .collect();
    probs.sort_by(|a, b| b.0.total_cmp(&a.0));
    if s.top_k > 0 {
        probs.truncate(s.top_k);
    }
    if s.min_p > 0.0 {
        let floor = probs[0].0 * s.min_p;
        let keep = probs.iter().take_while(|p| p.0 >= floor).count().max(1);
        probs.truncate(keep);
    }
    let total: f64 = probs.iter().map(|p| p.0).sum();
    let top_p = s.top_p.clamp(0.0, 1.0);
    let mut kept = 0.0;
    let mut n = 0;
    for p in &probs {
        kept += p.0 / total;
        n += 1;
        if kept >= top_p {
            break;
        }
    }
    probs.truncate(n);
    probs
}
