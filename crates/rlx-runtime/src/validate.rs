//! The validation layer: a compiled graph's every node checked against the reference
//! interpreter (`rlx-interp`, built in whatever backends are), on any device.
//!
//! The graph the backend compiled (after passes and legalization) is compiled once more
//! with every node's value as an output (a *probe*: fusion may still group nodes, but each
//! value is written out), and run on the device. Then each node is evaluated on the host by
//! the interpreter from the **device's** values of its operands, so a node is judged alone:
//! the first node whose own result diverges is named, with its operands, even when errors
//! would otherwise pile up from earlier nodes.

use crate::{Backend, CompileOptions, ParamStore, RuntimeError};
use rlx_driver::Device;
use rlx_ir::{DType, Graph, NodeId, Op, Tensor};
use std::collections::HashMap;

/// How far a node's device value may be from the interpreter's: relative L2 error for
/// floats (by the node's dtype), exact for integers and booleans.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-9,
        DType::F32 => 1e-3,
        DType::F16 => 1e-2,
        DType::BF16 => 4e-2,
        _ => 0.0,
    }
}

/// One node's check.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeCheck {
    /// the node in the compiled (legalized) graph
    pub node: usize,
    /// its op
    pub op: String,
    /// its name (from the model file when imported)
    pub name: String,
    /// its type, e.g. `f32[2,128,384]`
    pub ty: String,
    /// relative L2 error against the interpreter (floats), or the fraction of elements that
    /// differ (integers, booleans)
    pub rel_err: f64,
    /// the largest absolute difference and the flat index where it is
    pub max_abs: (f64, usize),
    /// the bound it was held to (see [`tolerance`])
    pub tolerance: f64,
    /// its operands: type and where each comes from (`input x`, `param w`, `node 12 (matmul)`)
    pub operands: Vec<String>,
}

impl NodeCheck {
    /// The node's value is within its tolerance.
    pub fn passed(&self) -> bool {
        self.rel_err <= self.tolerance
    }
}

impl std::fmt::Display for NodeCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = if self.name.is_empty() {
            String::new()
        } else {
            format!(" `{}`", self.name)
        };
        write!(
            f,
            "node {}{name} ({}, {}): error {:.2e} (tolerance {:.0e}), largest |difference| {:.3e} at element {}; operands: {}",
            self.node,
            self.op,
            self.ty,
            self.rel_err,
            self.tolerance,
            self.max_abs.0,
            self.max_abs.1,
            self.operands.join(", ")
        )
    }
}

/// What a validation run found.
#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    /// the device checked
    pub device: Device,
    /// every node checked, in graph order
    pub checks: Vec<NodeCheck>,
    /// nodes the interpreter cannot evaluate (op name and why), left unchecked
    pub unchecked: Vec<String>,
}

impl Validation {
    /// The first node (in graph order) whose value is outside its tolerance.
    pub fn first_divergence(&self) -> Option<&NodeCheck> {
        self.checks.iter().find(|c| !c.passed())
    }

    /// The checked node with the largest error relative to its tolerance.
    pub fn worst(&self) -> Option<&NodeCheck> {
        self.checks.iter().max_by(|a, b| {
            let r = |c: &NodeCheck| c.rel_err / c.tolerance.max(f64::MIN_POSITIVE);
            r(a).total_cmp(&r(b))
        })
    }

    /// Ok when every node agrees; else the first divergence as a [`RuntimeError::Diverged`].
    ///
    /// # Errors
    /// A node's value is outside its tolerance.
    pub fn into_result(self) -> Result<Validation, RuntimeError> {
        match self.first_divergence() {
            Some(c) => Err(RuntimeError::Diverged {
                device: self.device,
                check: Box::new(c.clone()),
            }),
            None => Ok(self),
        }
    }
}

/// The output name of node `id` in the probe graph.
fn probe_name(id: usize) -> String {
    format!("__validate_{id}")
}

/// Checks every node of `graph` (a compiled variant's graph) on `backend`'s device against
/// the CPU interpreter, with these inputs and params.
///
/// # Errors
/// The probe graph does not compile or run on the device, or the crate was built without
/// the CPU backend (which holds the interpreter).
pub(crate) fn validate(
    backend: &dyn Backend,
    device: Device,
    options: &CompileOptions,
    graph: &Graph,
    inputs: &HashMap<String, Tensor>,
    params: &ParamStore,
) -> Result<Validation, RuntimeError> {
    let mut probe = graph.clone();
    probe.clear_outputs();
    let mut names: HashMap<usize, String> = HashMap::new();
    for (i, node) in graph.nodes().iter().enumerate() {
        if node.op.is_leaf() {
            continue;
        }
        let name = probe_name(i);
        probe.output(&name, NodeId(i));
        names.insert(i, name);
    }
    let options = CompileOptions {
        print_report: false,
        ..options.clone()
    };
    let executable = backend.compile(&probe, &options)?;
    let values: HashMap<String, Tensor> = executable.run(inputs, params)?.into_iter().collect();
    let snapshot = params.snapshot();
    let mut checks = Vec::new();
    let mut unchecked = Vec::new();
    for (i, node) in graph.nodes().iter().enumerate() {
        let Some(name) = names.get(&i) else {
            continue;
        };
        let Some(got) = values.get(name) else {
            unchecked.push(format!(
                "node {i} ({}): the device returned no value",
                node.op.name()
            ));
            continue;
        };
        let mut operands = Vec::new();
        let mut ins: Vec<&Tensor> = Vec::new();
        let mut missing = None;
        for &id in &node.inputs {
            let src = graph.node(id);
            let value: Option<&Tensor> = match &src.op {
                Op::Input { name } => inputs.get(name),
                Op::Param { name } => snapshot.get(name).map(|t| &**t),
                Op::Constant(t) => Some(&**t),
                _ => names.get(&id.0).and_then(|n| values.get(n)),
            };
            let from = match &src.op {
                Op::Input { name } => format!("input `{name}`"),
                Op::Param { name } => format!("param `{name}`"),
                Op::Constant(_) => "a constant".to_string(),
                op => format!("node {} ({})", id.0, op.name()),
            };
            operands.push(format!("{} from {from}", src.ty));
            match value {
                Some(v) => ins.push(v),
                None => missing = Some(from),
            }
        }
        if let Some(from) = missing {
            unchecked.push(format!(
                "node {i} ({}): no value for {from}",
                node.op.name()
            ));
            continue;
        }
        let want = match reference(&node.op, &ins) {
            Ok(t) => t,
            Err(why) => {
                unchecked.push(format!("node {i} ({}): {why}", node.op.name()));
                continue;
            }
        };
        let (rel_err, max_abs) = compare(got, &want);
        checks.push(NodeCheck {
            node: i,
            op: node.op.name().to_string(),
            name: node.name.clone(),
            ty: node.ty.to_string(),
            rel_err,
            max_abs,
            tolerance: tolerance(node.ty.dtype),
            operands,
        });
    }
    Ok(Validation {
        device,
        checks,
        unchecked,
    })
}

fn reference(op: &Op, ins: &[&Tensor]) -> Result<Tensor, String> {
    rlx_interp::eval_op(op, ins).map_err(|e| e.to_string())
}

/// Relative error of `got` against `want` (L2 for floats; the fraction of differing elements
/// otherwise; 1 or more on a shape, dtype or NaN mismatch) and the largest |difference|.
fn compare(got: &Tensor, want: &Tensor) -> (f64, (f64, usize)) {
    if got.shape() != want.shape() || got.dtype() != want.dtype() {
        return (f64::INFINITY, (f64::INFINITY, 0));
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let mut max_abs = (0.0f64, 0usize);
    let (mut diff2, mut norm2, mut differ) = (0.0f64, 0.0f64, 0usize);
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let same_nan = a.is_nan() && b.is_nan();
        let same_inf = a.is_infinite() && a == b;
        let d = if same_nan || same_inf {
            0.0
        } else if a.is_nan() || b.is_nan() || a.is_infinite() || b.is_infinite() {
            f64::INFINITY
        } else {
            (a - b).abs()
        };
        if d > max_abs.0 || (d.is_infinite() && !max_abs.0.is_infinite()) {
            max_abs = (d, i);
        }
        if d != 0.0 {
            differ += 1;
        }
        diff2 += d * d;
        if b.is_finite() {
            norm2 += b * b;
        }
    }
    let rel = if !got.dtype().is_float() {
        differ as f64 / g.len().max(1) as f64
    } else if diff2 == 0.0 {
        0.0
    } else {
        (diff2 / norm2.max(f64::MIN_POSITIVE)).sqrt()
    };
    (rel, max_abs)
}
