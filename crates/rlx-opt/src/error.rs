//! Errors of the optimizer. Each names the pass or stage, and the node, op and types involved.

use crate::legalize::DispatchReport;
use rlx_ir::IrError;
use std::fmt;

/// What went wrong while optimizing or lowering a graph.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OptError {
    /// A pass built or left an invalid graph (a bug in the pass, or an invalid input graph
    /// when `pass` is `"input"`).
    #[error("pass `{pass}`: {source}")]
    Pass {
        /// the pass name, as in [`crate::PASSES`], or `"input"`, `"legalize"`, `"lower"`
        pass: &'static str,
        /// what the verifier or the graph builder found
        #[source]
        source: IrError,
    },
    /// A pass name that [`crate::PASSES`] does not list.
    #[error("unknown pass `{name}`; known passes: {known}")]
    UnknownPass {
        /// the name asked for
        name: String,
        /// the known names, comma separated
        known: String,
    },
    /// Lowering needs static shapes and found a symbolic dim.
    #[error("lower: node `{node}` ({op}) has type {ty} with symbolic dim `{symbol}`; bind it before lowering")]
    Symbolic {
        /// node name
        node: String,
        /// op name
        op: &'static str,
        /// the node's type
        ty: String,
        /// the first symbol found
        symbol: String,
    },
    /// Lowering produced a kernel that fails [`rlx_ir::kernel::LoopKernel::verify`] (a bug
    /// in the lowering).
    #[error("lower: kernel for node `{node}` ({op}, {ty}) is invalid: {message}")]
    Kernel {
        /// the root node of the kernel
        node: String,
        /// its op name
        op: &'static str,
        /// its type
        ty: String,
        /// what the kernel verifier said
        message: String,
    },
}

/// One node that the target cannot run, natively or through a decomposition.
#[derive(Debug, Clone, PartialEq)]
pub struct UnsupportedNode {
    /// node name
    pub node: String,
    /// op name
    pub op: &'static str,
    /// the operand types, formatted (`f32[2,3]`), in input order
    pub inputs: Vec<String>,
    /// the result type, formatted
    pub output: String,
    /// why: no rule, or which primitive a decomposition needed
    pub reason: String,
}

impl fmt::Display for UnsupportedNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ins = if self.inputs.is_empty() {
            "no inputs".to_string()
        } else {
            self.inputs.join(", ")
        };
        write!(
            f,
            "`{}` ({}: {} -> {}; {})",
            self.node, self.op, ins, self.output, self.reason
        )
    }
}

/// Why a graph cannot be legalized for a device.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LegalizeError {
    /// Some nodes run neither natively nor through a decomposition. Lists all of them.
    #[error("{} cannot run on `{device}`: {}", node_count(nodes.len()), join(nodes))]
    Unsupported {
        /// the device name
        device: String,
        /// every unsupported node, in graph order
        nodes: Vec<UnsupportedNode>,
        /// the full dispatch report, so `rlx report` can still print it
        report: Box<DispatchReport>,
    },
    /// The input graph or the legalized graph is invalid.
    #[error("legalize for `{device}`: {source}")]
    Graph {
        /// the device name
        device: String,
        /// what the verifier or the builder found
        #[source]
        source: IrError,
    },
}

fn node_count(n: usize) -> String {
    if n == 1 {
        "1 node".to_string()
    } else {
        format!("{n} nodes")
    }
}

fn join(nodes: &[UnsupportedNode]) -> String {
    nodes
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
