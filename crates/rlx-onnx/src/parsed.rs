//! A model decoded once and imported again for each binding of its symbolic dims.
//!
//! Exported models leave `batch`, `sequence`, ... symbolic, and many ops need static dims
//! (CumSum, Range lengths, Conv, Reshape targets computed from `Shape`). [`ParsedModel`]
//! keeps the decoded protobuf and the weights (decoded once, shared by every import), so a
//! runtime can specialise the graph to the sizes of the inputs it is given: every dim is
//! then static and every shape computation folds at import.

use crate::import::{self, Initializers};
use crate::tensor::ExternalData;
use crate::{proto, ImportOptions, OnnxError};
use bytes::Bytes;
use rlx_ir::{Dim, Graph, Tensor, TensorType};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A decoded ONNX model whose graph is imported on demand, once per set of dim sizes.
pub struct ParsedModel {
    model: proto::ModelProto,
    label: String,
    inits: Initializers,
    inputs: Vec<(String, TensorType)>,
    outputs: Vec<(String, Option<TensorType>)>,
}

/// One import of a [`ParsedModel`]: the graph and the weights it binds (shared with the
/// parsed model, not copied), and for a model run in stages, what is left to the host.
#[derive(Debug)]
pub struct Specialised {
    /// the graph
    pub graph: Graph,
    /// weights by param name
    pub params: Vec<(String, Arc<Tensor>)>,
    /// graph inputs whose given value was frozen into the graph
    pub frozen_inputs: Vec<String>,
    /// data-dependent nodes to evaluate on the host after the graph runs (empty when the
    /// graph computes the model's outputs; see [`crate::stage`])
    pub cut: crate::stage::Cut,
}

impl ParsedModel {
    /// Reads an ONNX file (memory-mapped) and decodes its weights, resolving external data
    /// next to it.
    ///
    /// # Errors
    /// As [`crate::load`], except unsupported nodes, which are reported by
    /// [`ParsedModel::specialise`].
    pub fn open(path: impl AsRef<Path>) -> Result<ParsedModel, OnnxError> {
        let (bytes, base, label) = crate::map_file(path.as_ref())?;
        ParsedModel::from_bytes(bytes, Some(base), &label)
    }

    /// Decodes a model from bytes; external data resolves against `base_dir`, `label` names
    /// the model in errors.
    ///
    /// # Errors
    /// As [`ParsedModel::open`].
    pub fn from_bytes(
        bytes: Bytes,
        base_dir: Option<PathBuf>,
        label: &str,
    ) -> Result<ParsedModel, OnnxError> {
        let model = crate::decode_model(bytes, label)?;
        let mut ext = ExternalData::new(base_dir);
        let inits = import::initializers(&model, label, &mut ext)?;
        let inputs = import::declared_inputs(&model, label, &Default::default())?;
        let outputs = import::declared_outputs(&model);
        Ok(ParsedModel {
            model,
            label: label.to_string(),
            inits,
            inputs,
            outputs,
        })
    }

    /// The run-time inputs with their declared types; dynamic dims are symbols, named by
    /// the model or `INPUT_dI` where it leaves them unnamed.
    pub fn inputs(&self) -> &[(String, TensorType)] {
        &self.inputs
    }

    /// The graph outputs in declared order with their declared types (`None` where the
    /// model leaves type or rank to inference).
    pub fn outputs(&self) -> &[(String, Option<TensorType>)] {
        &self.outputs
    }

    /// The symbolic dims of the inputs, each once, in order of first appearance.
    pub fn symbols(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, ty) in &self.inputs {
            for d in ty.shape.dims() {
                if let Dim::Sym(s) = d {
                    if !out.iter().any(|o| **o == **s) {
                        out.push(s.to_string());
                    }
                }
            }
        }
        out
    }

    /// The name the model goes by in errors (its path).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Imports the graph with `opts` (dims bound by name, input values that may be frozen).
    ///
    /// # Errors
    /// Unsupported nodes (all listed), inconsistent models, shapes that do not agree once
    /// the dims are bound.
    pub fn specialise(&self, opts: &ImportOptions) -> Result<Specialised, OnnxError> {
        let m = import::import_decoded(&self.model, &self.label, self.inits.clone(), opts, true)?;
        let host = m
            .outputs
            .iter()
            .find(|(_, l)| matches!(l, crate::OutputLayout::Host(_)));
        if let Some((name, _)) = host {
            return Err(OnnxError::Model {
                file: self.label.clone(),
                message: format!(
                    "output `{name}` is a string tensor, computed at import; only a one-graph \
                     import (rlx_onnx::load, OnnxModel::outputs) returns those"
                ),
            });
        }
        Ok(Specialised {
            graph: m.graph,
            params: m.params,
            frozen_inputs: m.frozen,
            cut: m.cut,
        })
    }

    /// Evaluates an import's cut on the host (see [`crate::stage::run_host`]).
    ///
    /// # Errors
    /// As [`crate::stage::run_host`].
    pub fn run_host(
        &self,
        cut: &crate::stage::Cut,
        inputs: &std::collections::HashMap<String, Tensor>,
        carried: &mut std::collections::HashMap<String, Tensor>,
    ) -> Result<(), OnnxError> {
        crate::stage::run_host(&self.model, &self.label, cut, inputs, carried)
    }
}
