//! `rlx.EmbeddingModel` and `rlx.embed`: sentence embeddings through `rlx_llm::Embedder`
//! (the same code as `rlx embed` and the server), returned as a numpy `(n, dim)` float32
//! array that owns the embedder's output without a copy.

use crate::convert;
use crate::error;
use crate::session::device_arg;
use numpy::PyArrayDyn;
use pyo3::prelude::*;
use rlx_llm::Embedder;
use std::sync::Arc;

/// A BERT-family model that embeds texts (several threads may call it at once).
#[pyclass(frozen, module = "rlx")]
pub struct EmbeddingModel {
    embedder: Arc<Embedder>,
    spec: String,
}

impl EmbeddingModel {
    /// Loads a folder (or `hf:<name>`) and compiles it for `device`.
    ///
    /// # Errors
    /// As `rlx_llm::Embedder::load`, raised as the matching `RlxError`.
    pub fn open(py: Python<'_>, spec: &str, device: &str) -> PyResult<EmbeddingModel> {
        let device = device_arg(device)?;
        let embedder = py
            .detach(|| Embedder::load(spec, device))
            .map_err(error::llm)?;
        Ok(EmbeddingModel {
            embedder: Arc::new(embedder),
            spec: spec.to_string(),
        })
    }

    /// Embeds texts as one batch, the GIL released while the model runs.
    pub fn embed_texts<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let embedder = self.embedder.clone();
        let e = py
            .detach(move || {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                embedder.embed(&refs)
            })
            .map_err(error::llm)?;
        let rows = e.tokens.len();
        convert::f32_matrix(py, rows, e.dim, e.values)
    }
}

#[pymethods]
impl EmbeddingModel {
    /// Mean-pooled, L2-normalised embeddings: a `(len(texts), dim)` float32 array.
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        self.embed_texts(py, texts)
    }

    /// The width of an embedding.
    #[getter]
    fn dim(&self) -> usize {
        self.embedder.dim()
    }

    /// The device it runs on.
    #[getter]
    fn device(&self) -> String {
        self.embedder.device().name().to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "rlx.EmbeddingModel('{}', device='{}')",
            self.spec,
            self.embedder.device()
        )
    }
}
