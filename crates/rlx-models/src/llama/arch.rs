//! What Gemma and Phi-3 add to the Llama graph, as data the loaders fill in: the
//! feed-forward's gate activation, the factor on the token embeddings, and the split of
//! fused projections (Phi-3's `qkv_proj` and `gate_up_proj`) into the rows of the separate
//! ones the graph and the CUDA engine read.
//!
//! Gemma: embeddings times `sqrt(hidden)` (transformers casts that factor to the weights'
//! dtype first, so a bf16 checkpoint scales by a bf16-rounded factor), RMSNorm weights
//! `1 + w` (added once at load: Hugging Face stores `w`, llama.cpp's converter stores
//! `w + 1`), GeGLU with GELU's tanh form, tied embeddings. Phi-3: fused q/k/v and
//! gate/up rows, SwiGLU, no biases.

use rlx_gguf::QuantFormat;

/// The activation of the feed-forward's gate: `act(gate) * up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FfnAct {
    /// SiLU (SwiGLU: Llama, Mistral, Qwen2, Phi-3)
    #[default]
    Silu,
    /// GELU's tanh approximation (GeGLU: Gemma's `gelu_pytorch_tanh`)
    GeluTanh,
}

/// The Gemma embedding factor `sqrt(hidden)` as transformers applies it: rounded to the
/// embedding's dtype (f16, bf16; f32 otherwise, as llama.cpp does for GGUF files).
pub fn gemma_embed_scale(hidden: usize, format: QuantFormat) -> f32 {
    let s = (hidden as f64).sqrt() as f32;
    match format {
        QuantFormat::F16 => half::f16::from_f32(s).to_f32(),
        QuantFormat::BF16 => half::bf16::from_f32(s).to_f32(),
        _ => s,
    }
}

/// Cuts the packed rows of a fused projection (`n` rows in all) into consecutive parts of
/// `counts` rows each; every row is whole blocks in any format, so the cut is on bytes.
pub(crate) fn split_rows(bytes: &[u8], n: usize, counts: &[usize]) -> Vec<Vec<u8>> {
    let row = bytes.len() / n.max(1);
    let mut at = 0;
    counts
        .iter()
        .map(|&c| {
            let part = bytes[at * row..(at + c) * row].to_vec();
            at += c;
            part
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_rows_split_in_order() {
        // 5 rows of 2 bytes: 2 + 1 + 2
        let b: Vec<u8> = (0..10).collect();
        let parts = split_rows(&b, 5, &[2, 1, 2]);
        assert_eq!(parts, vec![vec![0, 1, 2, 3], vec![4, 5], vec![6, 7, 8, 9]]);
    }

    #[test]
    fn gemma_scale_rounds_to_the_dtype() {
        assert_eq!(gemma_embed_scale(2048, QuantFormat::F32), 2048f32.sqrt());
        // sqrt(2048) = 45.2548...; bf16 keeps 8 bits of mantissa: 45.25
        assert_eq!(gemma_embed_scale(2048, QuantFormat::BF16), 45.25);
        assert_eq!(gemma_embed_scale(2048, QuantFormat::Q8_0), 2048f32.sqrt());
    }
}
