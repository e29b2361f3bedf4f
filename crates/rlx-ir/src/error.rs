//! Errors of graph construction and verification. Each names the node, its op and types.

/// What is wrong with a graph.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IrError {
    /// Shape or dtype inference failed for a node.
    #[error("node `{node}` ({op}): {message}; inputs: {inputs}")]
    Infer {
        /// node name
        node: String,
        /// op name
        op: &'static str,
        /// the input types, formatted
        inputs: String,
        /// what rule was broken
        message: String,
    },
    /// A node refers to a node that is not defined before it.
    #[error("node `{node}` ({op}) uses node #{input}, which is not defined before it (cycle or dangling reference)")]
    BadReference {
        /// node name
        node: String,
        /// op name
        op: &'static str,
        /// the offending node index
        input: usize,
    },
    /// A leaf (input, param, constant) has inputs.
    #[error("node `{node}` ({op}) is a leaf but has {count} inputs")]
    LeafWithInputs {
        /// node name
        node: String,
        /// op name
        op: &'static str,
        /// how many inputs it has
        count: usize,
    },
    /// The recorded type of a node differs from what inference gives.
    #[error("node `{node}` ({op}) records type {recorded} but its inputs give {inferred}")]
    TypeMismatch {
        /// node name
        node: String,
        /// op name
        op: &'static str,
        /// type stored in the node
        recorded: String,
        /// type inference gives
        inferred: String,
    },
    /// Two inputs or two params share a name, or a name is empty.
    #[error("{kind} name `{name}` is used twice or is empty")]
    DuplicateName {
        /// "input", "param" or "output"
        kind: &'static str,
        /// the name
        name: String,
    },
    /// An output refers to a node that does not exist.
    #[error("output `{name}` refers to node #{node}, but the graph has {count} nodes")]
    BadOutput {
        /// output name
        name: String,
        /// node index
        node: usize,
        /// number of nodes
        count: usize,
    },
    /// The graph has no outputs.
    #[error("graph has no outputs")]
    NoOutputs,
    /// A symbolic dim was bound to two different sizes.
    #[error("symbolic dim `{name}` bound to both {first} and {second}")]
    Binding {
        /// symbol name
        name: String,
        /// first size seen
        first: usize,
        /// conflicting size
        second: usize,
    },
}
