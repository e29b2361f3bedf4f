//! ONNX models with dynamic axes on a [`Session`]: the model is decoded once
//! ([`ParsedModel`]) and imported again with every dim bound for each new shape
//! signature of the inputs, so ops that need static shapes run whatever the sizes. The CLI
//! (`rlx run`, `rlx bench`) and the Python package's `InferenceSession` share it.
//!
//! A model whose shapes depend on values it computes runs in stages (`crate::stage`): each
//! import stops at the data-dependent nodes it cannot fold, the graph up to them is
//! compiled, and a host step evaluates them before the next stage is imported with their
//! results' shapes bound. The `DynamicGraph` caches every stage per signature.

use crate::{ImportOptions, ParsedModel};
use rlx_ir::{Tensor, TensorType};
use rlx_runtime::{CompileOptions, DynamicGraph, HostStep, Session, Specialised};
use std::collections::HashMap;
use std::sync::Arc;

/// A [`DynamicGraph`] over an ONNX model: each shape signature imports the model with its
/// dims bound to the inputs' sizes and compiles it with `options`.
pub fn dynamic(
    session: &Session,
    model: Arc<ParsedModel>,
    options: CompileOptions,
) -> DynamicGraph {
    dynamic_with(session, model, HashMap::new(), options)
}

/// [`dynamic`] with input values the importer may freeze where the IR needs a static value
/// (see [`ImportOptions::known_inputs`]); only for runs with exactly these values.
pub fn dynamic_with(
    session: &Session,
    model: Arc<ParsedModel>,
    known_inputs: HashMap<String, Tensor>,
    options: CompileOptions,
) -> DynamicGraph {
    let inputs = model.inputs().to_vec();
    let build = move |dims: &rlx_runtime::Bindings, carried: &[(String, TensorType)]| {
        let opts = ImportOptions {
            known_inputs: known_inputs.clone(),
            dims: dims.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            carried: carried.to_vec(),
            ..ImportOptions::default()
        };
        let s = model.specialise(&opts)?;
        let then: Option<HostStep> = if s.cut.is_empty() {
            None
        } else {
            let model = model.clone();
            let cut = s.cut;
            Some(Arc::new(move |inputs, carried| {
                model.run_host(&cut, inputs, carried)?;
                Ok(())
            }))
        };
        Ok(Specialised {
            graph: s.graph,
            params: s.params,
            then,
        })
    };
    session.dynamic(inputs, Box::new(build), options)
}
