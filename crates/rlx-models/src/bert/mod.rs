//! The BERT family (all-MiniLM-L6-v2, BERT-base, ...): a Hugging Face folder
//! (`config.json`, `model.safetensors`, `tokenizer.json`) to a graph, its weights and the
//! inputs for a batch of texts.

pub mod graph;
pub mod params;

pub use graph::{
    BertOutputs, ATTENTION_MASK, INPUT_IDS, LAST_HIDDEN_STATE, POSITION_IDS, SENTENCE_EMBEDDING,
    TOKEN_TYPE_IDS,
};

use crate::config::BertConfig;
use crate::error::{ModelError, Result};
use crate::tokenizer::{Encoded, TextTokenizer};
use crate::weights::Weights;
use rlx_ir::{Graph, SplitMix64, Tensor, TensorData};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A BERT model folder, loaded: config, graph and weights.
pub struct BertModel {
    /// the folder
    pub dir: PathBuf,
    /// its `config.json`
    pub config: BertConfig,
    /// the encoder graph (symbolic `batch` and `seq`)
    pub graph: Graph,
    /// the graph's params, made from the checkpoint
    pub params: Vec<(String, Tensor)>,
    /// the longest sequence the tokenizer produces (sentence-transformers'
    /// `max_seq_length` when the folder has it, capped by the position table)
    pub max_seq_len: usize,
}

impl BertModel {
    /// Loads a folder with the default outputs (`sentence_embedding`).
    ///
    /// # Errors
    /// See [`BertModel::load_with`].
    pub fn load(dir: &Path) -> Result<BertModel> {
        BertModel::load_with(dir, BertOutputs::default())
    }

    /// Loads `config.json` and the safetensors weights of a folder and builds the graph.
    ///
    /// # Errors
    /// Missing files, a config the builder cannot honour, a missing or misshapen tensor
    /// (named, with the shape expected).
    pub fn load_with(dir: &Path, outputs: BertOutputs) -> Result<BertModel> {
        let cfg_path = dir.join("config.json");
        if !cfg_path.is_file() {
            return Err(ModelError::MissingFile {
                dir: dir.display().to_string(),
                file: "config.json".into(),
                what: "the model's Hugging Face config".into(),
            });
        }
        let config = BertConfig::from_file(&cfg_path)?;
        let weights = Weights::open_dir(dir)?;
        let params = params::load(&weights, &config)?;
        let graph = graph::build(&config, outputs)?;
        let max_seq_len = max_seq_len(dir, &config);
        Ok(BertModel {
            dir: dir.to_path_buf(),
            config,
            graph,
            params,
            max_seq_len,
        })
    }

    /// The folder's `tokenizer.json`, truncating at [`BertModel::max_seq_len`].
    ///
    /// # Errors
    /// The file is absent or unreadable.
    pub fn tokenizer(&self) -> Result<TextTokenizer> {
        let path = self.dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(ModelError::MissingFile {
                dir: self.dir.display().to_string(),
                file: "tokenizer.json".into(),
                what: "the tokenizer (Hugging Face tokenizers format)".into(),
            });
        }
        TextTokenizer::from_file(&path, self.max_seq_len)
    }

    /// Graph inputs for `n` tokens of random ids (in `[0, vocab)`) per row, all attended:
    /// what a benchmark feeds.
    pub fn random_inputs(&self, batch: usize, seq: usize, seed: u64) -> HashMap<String, Tensor> {
        let mut rng = SplitMix64(seed);
        let vocab = self.config.vocab_size as u64;
        let ids: Vec<Vec<u32>> = (0..batch)
            .map(|_| (0..seq).map(|_| (rng.next_u64() % vocab) as u32).collect())
            .collect();
        let enc = Encoded {
            type_ids: vec![vec![0; seq]; batch],
            ids,
            pad_id: 0,
            pad_type_id: 0,
        };
        inputs(&enc)
    }

    /// Completes `given` with the inputs a caller may leave out, shaped like the ids:
    /// `attention_mask` all ones, `token_type_ids` zeros, `position_ids` `0..seq`.
    ///
    /// # Errors
    /// `input_ids` is absent or not a 2-D i64 tensor.
    pub fn complete_inputs(&self, given: &mut HashMap<String, Tensor>) -> Result<()> {
        let Some(ids) = given.get(INPUT_IDS) else {
            return Err(ModelError::Input(format!(
                "`{INPUT_IDS}` is required (i64 [batch, seq])"
            )));
        };
        let &[b, s] = ids.shape() else {
            return Err(ModelError::Input(format!(
                "`{INPUT_IDS}` must be i64 [batch, seq], got {}{:?}",
                ids.dtype(),
                ids.shape()
            )));
        };
        let fill = |f: &dyn Fn(usize) -> i64| {
            Tensor::new(vec![b, s], TensorData::I64((0..b * s).map(f).collect()))
                .expect("sizes match")
        };
        given
            .entry(ATTENTION_MASK.into())
            .or_insert_with(|| fill(&|_| 1));
        given
            .entry(TOKEN_TYPE_IDS.into())
            .or_insert_with(|| fill(&|_| 0));
        given
            .entry(POSITION_IDS.into())
            .or_insert_with(|| fill(&|i| (i % s.max(1)) as i64));
        Ok(())
    }
}

/// The graph inputs for a tokenized batch: padded on the right to the longest text, with
/// the mask marking real tokens and positions `0..seq` on every row.
pub fn inputs(enc: &Encoded) -> HashMap<String, Tensor> {
    inputs_padded(enc, enc.max_len())
}

/// As [`inputs`], every row padded to `len` tokens (at least the longest text).
pub fn inputs_padded(enc: &Encoded, len: usize) -> HashMap<String, Tensor> {
    let b = enc.ids.len();
    let s = len.max(enc.max_len());
    let mut ids = Vec::with_capacity(b * s);
    let mut mask = Vec::with_capacity(b * s);
    let mut types = Vec::with_capacity(b * s);
    let mut pos = Vec::with_capacity(b * s);
    for (row, trow) in enc.ids.iter().zip(&enc.type_ids) {
        for j in 0..s {
            let real = j < row.len();
            ids.push(if real { row[j] } else { enc.pad_id } as i64);
            types.push(if real {
                trow.get(j).copied().unwrap_or(0)
            } else {
                enc.pad_type_id
            } as i64);
            mask.push(real as i64);
            pos.push(j as i64);
        }
    }
    let t = |v: Vec<i64>| Tensor::new(vec![b, s], TensorData::I64(v.into())).expect("sizes match");
    HashMap::from([
        (INPUT_IDS.to_string(), t(ids)),
        (ATTENTION_MASK.to_string(), t(mask)),
        (TOKEN_TYPE_IDS.to_string(), t(types)),
        (POSITION_IDS.to_string(), t(pos)),
    ])
}

/// sentence-transformers' `max_seq_length` (`sentence_bert_config.json`), else the
/// position table's size; never more than the position table.
fn max_seq_len(dir: &Path, cfg: &BertConfig) -> usize {
    let st = std::fs::read_to_string(dir.join("sentence_bert_config.json"))
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| v.get("max_seq_length").and_then(|n| n.as_u64()))
        .map(|n| n as usize);
    st.unwrap_or(cfg.max_position_embeddings)
        .clamp(1, cfg.max_position_embeddings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_right_and_masks() {
        let enc = Encoded {
            ids: vec![vec![101, 7, 102], vec![101, 102]],
            type_ids: vec![vec![0, 0, 0], vec![0, 0]],
            pad_id: 0,
            pad_type_id: 0,
        };
        let m = inputs(&enc);
        assert_eq!(m[INPUT_IDS].shape(), &[2, 3]);
        assert_eq!(
            m[INPUT_IDS].to_f64_vec(),
            vec![101.0, 7.0, 102.0, 101.0, 102.0, 0.0]
        );
        assert_eq!(
            m[ATTENTION_MASK].to_f64_vec(),
            vec![1.0, 1.0, 1.0, 1.0, 1.0, 0.0]
        );
        assert_eq!(
            m[POSITION_IDS].to_f64_vec(),
            vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]
        );
    }
}
