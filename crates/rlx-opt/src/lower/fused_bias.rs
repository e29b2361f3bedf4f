//! What lowering's `fuse_bias` rule decided for a graph (see `plan.rs` for the rule and for
//! why it is a rule of lowering rather than a kernel-IR pass), for `rlx dump --after`.

use super::{check_static, plan};
use crate::OptError;
use rlx_ir::Graph;
use std::fmt;

/// One decision of the `fuse_bias` rule: a cheap op over a library op's result (the bias
/// added to a merged q/k/v projection) that several kernels read runs once, as that library
/// kernel's epilogue, instead of in each reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FusedBias {
    /// the library kernel (its node's name), the GEMM
    pub library: String,
    /// the node that became its epilogue (the bias add)
    pub epilogue: String,
}

impl fmt::Display for FusedBias {
    /// `bias <library> (<epilogue>)`, as the kernel-IR passes' decisions print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bias {} ({})", self.library, self.epilogue)
    }
}

/// The `fuse_bias` rule's decisions for `graph` (static shapes), in graph order; the same
/// the program [`crate::lower()`] builds from `graph` follows.
///
/// # Errors
/// [`OptError::Symbolic`] naming the first node with a symbolic dim.
pub fn fused_biases(graph: &Graph) -> Result<Vec<FusedBias>, OptError> {
    check_static(graph)?;
    Ok(plan::plan(graph)
        .fused_biases
        .into_iter()
        .map(|(library, epilogue)| FusedBias {
            library: graph.node(library).name.clone(),
            epilogue: graph.node(epilogue).name.clone(),
        })
        .collect())
}
