//! The importer's error: every failure names the file and, where one is involved, the node
//! (name, domain, op type, opset) or tensor.

use std::fmt;

/// One node the importer cannot map, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedNode {
    /// node name (or `#index` when the model leaves it empty)
    pub node: String,
    /// operator domain (`ai.onnx` for the default domain)
    pub domain: String,
    /// operator type, e.g. `Conv`
    pub op_type: String,
    /// opset version of the node's domain
    pub opset: i64,
    /// what is missing: the op, an attribute value, a dtype
    pub reason: String,
}

impl fmt::Display for UnsupportedNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node `{}` ({}:{} opset {}): {}",
            self.node, self.domain, self.op_type, self.opset, self.reason
        )
    }
}

/// Why importing an ONNX model failed.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// The file (or an external data file) could not be read.
    #[error("{path}: {source}")]
    Io {
        /// the file
        path: String,
        /// the OS error
        source: std::io::Error,
    },
    /// The bytes are not a valid ONNX protobuf.
    #[error("{file}: not a valid ONNX model: {message}")]
    Decode {
        /// the file
        file: String,
        /// what the decoder said
        message: String,
    },
    /// A tensor (initializer, constant, test data) is malformed or unsupported.
    #[error("{file}: tensor `{name}`: {message}")]
    Tensor {
        /// the file
        file: String,
        /// tensor name
        name: String,
        /// what is wrong
        message: String,
    },
    /// The model is inconsistent (dangling names, bad shapes, wrong attribute types).
    #[error("{file}: {message}")]
    Model {
        /// the file
        file: String,
        /// what is wrong, naming the node or value
        message: String,
    },
    /// Nodes that cannot be imported, all of them in one list.
    #[error("{file}: {} unsupported node(s):\n  {}", nodes.len(), list(nodes))]
    Unsupported {
        /// the file
        file: String,
        /// every unsupported node
        nodes: Vec<UnsupportedNode>,
    },
    /// The imported graph failed IR verification (a bug in the importer or a bad model).
    #[error("{file}: node `{node}`: {source}")]
    Ir {
        /// the file
        file: String,
        /// the ONNX node being mapped
        node: String,
        /// the IR error (boxed: it is large and rare)
        source: Box<rlx_ir::IrError>,
    },
}

fn list(nodes: &[UnsupportedNode]) -> String {
    nodes
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join("\n  ")
}

impl OnnxError {
    /// True when the model is valid but uses something the importer does not implement.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, OnnxError::Unsupported { .. })
    }
}
