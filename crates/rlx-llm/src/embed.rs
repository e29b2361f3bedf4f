//! [`Embedder`]: sentence embeddings (mean over real tokens, L2-normalised) with a
//! BERT-family folder. Texts of different lengths run as one batch, padded to the longest
//! and masked. The CLI's `embed`, the server's embedding thread and Python's `rlx.embed`
//! all run through it.

use crate::LlmError;
use rlx_driver::Device;
use rlx_models::bert::{self, SENTENCE_EMBEDDING};
use rlx_models::{BertModel, Family, TextTokenizer};
use rlx_runtime::{CompileOptions, CompiledGraph, Session};
use std::path::{Path, PathBuf};

/// [`Embedder::embed_batched`] pads each batch to a multiple of this many tokens.
pub const PAD_MULTIPLE: usize = 16;

/// A BERT-family model compiled on a device, ready to embed batches of texts (from several
/// threads at once).
///
/// ```no_run
/// use rlx_llm::Embedder;
/// # fn main() -> Result<(), rlx_llm::LlmError> {
/// let embedder = Embedder::load("models/minilm", rlx_driver::Device::Cpu)?;
/// let e = embedder.embed(&["A cat sat on the mat.", "Dogs play outside."])?;
/// assert_eq!(e.rows().count(), 2);
/// println!("{} floats per text", e.dim);
/// # Ok(())
/// # }
/// ```
pub struct Embedder {
    dir: PathBuf,
    tokenizer: TextTokenizer,
    compiled: CompiledGraph,
    max_seq_len: usize,
    dim: usize,
    device: Device,
}

/// The embeddings of one batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// floats per text
    pub dim: usize,
    /// one row of `dim` floats per text, row after row
    pub values: Vec<f32>,
    /// tokens of each text (after truncation)
    pub tokens: Vec<usize>,
}

impl Embeddings {
    /// The rows, one per text.
    pub fn rows(&self) -> impl Iterator<Item = &[f32]> {
        self.values.chunks(self.dim.max(1))
    }
}

impl Embedder {
    /// Loads a model folder (or `hf:<owner>/<name>`, downloaded into the cache) and compiles
    /// it for `device`.
    ///
    /// # Errors
    /// The folder is missing or not a BERT-family model (a Llama folder says to generate
    /// instead), the device is unavailable, or the graph does not compile there.
    pub fn load(spec: &str, device: Device) -> Result<Embedder, LlmError> {
        Embedder::load_with(spec, device, CompileOptions::default())
    }

    /// As [`Embedder::load`], compiled with `options` (mixed precision, say).
    ///
    /// # Errors
    /// As [`Embedder::load`].
    pub fn load_with(
        spec: &str,
        device: Device,
        options: CompileOptions,
    ) -> Result<Embedder, LlmError> {
        let model_err = |e: rlx_models::ModelError| LlmError::Model(e.to_string());
        let dir = rlx_models::resolve(spec).map_err(model_err)?;
        if rlx_models::family(&dir).map_err(model_err)? == Family::Llama {
            return Err(LlmError::Model(format!(
                "{}: a Llama model generates text; use `rlx generate --model {}`",
                dir.display(),
                dir.display()
            )));
        }
        let session = Session::new(device)?;
        let model = BertModel::load(&dir).map_err(model_err)?;
        let tokenizer = model.tokenizer().map_err(model_err)?;
        for (name, t) in &model.params {
            session.set_param(name, t.clone());
        }
        let compiled = session.compile(&model.graph, options)?;
        Ok(Embedder {
            dir,
            tokenizer,
            compiled,
            max_seq_len: model.max_seq_len,
            dim: model.config.hidden_size,
            device,
        })
    }

    /// Embeds `texts` as one batch.
    ///
    /// # Errors
    /// A text the tokenizer rejects, or a run failure.
    pub fn embed(&self, texts: &[&str]) -> Result<Embeddings, LlmError> {
        if texts.is_empty() {
            return Ok(Embeddings {
                dim: self.dim(),
                values: Vec::new(),
                tokens: Vec::new(),
            });
        }
        let enc = self
            .tokenizer
            .encode(texts)
            .map_err(|e| LlmError::Invalid(e.to_string()))?;
        let values = self.run(&bert::inputs(&enc))?;
        Ok(Embeddings {
            dim: values.len() / texts.len(),
            values,
            tokens: enc.lengths(),
        })
    }

    /// Embeds any number of texts in batches of up to `batch` texts of similar length: the
    /// texts are sorted by token count, each batch is padded to its longest text rounded up
    /// to a multiple of [`PAD_MULTIPLE`] (few distinct shapes, so few compiled variants),
    /// and the rows come back in the order of `texts`.
    ///
    /// # Errors
    /// A text the tokenizer rejects, or a run failure.
    pub fn embed_batched(&self, texts: &[&str], batch: usize) -> Result<Embeddings, LlmError> {
        let enc = self
            .tokenizer
            .encode(texts)
            .map_err(|e| LlmError::Invalid(e.to_string()))?;
        let lengths = enc.lengths();
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
        let dim = self.dim();
        let mut values = vec![0f32; texts.len() * dim];
        for chunk in order.chunks(batch.max(1)) {
            let part = rlx_models::Encoded {
                ids: chunk.iter().map(|&i| enc.ids[i].clone()).collect(),
                type_ids: chunk.iter().map(|&i| enc.type_ids[i].clone()).collect(),
                pad_id: enc.pad_id,
                pad_type_id: enc.pad_type_id,
            };
            let len = part
                .max_len()
                .next_multiple_of(PAD_MULTIPLE)
                .min(self.max_seq_len.max(part.max_len()));
            let rows = self.run(&bert::inputs_padded(&part, len))?;
            if rows.len() != chunk.len() * dim {
                return Err(LlmError::Model(format!(
                    "the graph gave {} floats for {} texts of {dim}",
                    rows.len(),
                    chunk.len()
                )));
            }
            for (r, &i) in chunk.iter().enumerate() {
                values[i * dim..(i + 1) * dim].copy_from_slice(&rows[r * dim..(r + 1) * dim]);
            }
        }
        Ok(Embeddings {
            dim,
            values,
            tokens: lengths,
        })
    }

    /// The sentence embeddings of one padded batch, row after row.
    fn run(
        &self,
        inputs: &std::collections::HashMap<String, rlx_ir::Tensor>,
    ) -> Result<Vec<f32>, LlmError> {
        let outputs = self.compiled.run(inputs)?;
        let emb = outputs
            .into_iter()
            .find(|(n, _)| n == SENTENCE_EMBEDDING)
            .map(|(_, t)| t)
            .ok_or_else(|| LlmError::Model("the graph has no sentence_embedding output".into()))?;
        Ok(match emb.as_f32() {
            Some(v) => v.to_vec(),
            None => emb.to_f64_vec().into_iter().map(|x| x as f32).collect(),
        })
    }

    /// The width of an embedding (the model's hidden size).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The model folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The tokenizer (truncating at [`Embedder::max_seq_len`]).
    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// The longest sequence a text is cut to.
    pub fn max_seq_len(&self) -> usize {
        self.max_seq_len
    }

    /// The device it runs on.
    pub fn device(&self) -> Device {
        self.device
    }
}
