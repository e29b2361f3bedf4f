//! The dispatch report: for every op node, which device runs it and how (native,
//! decomposed, unsupported), plus a per-op-kind summary. Printed by `rlx report` and with
//! `RLX_DISPATCH_REPORT=1`; `--json` uses [`DispatchReport::to_json`].

use rlx_ir::{DType, Shape};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt;

/// How a node runs on its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum How {
    /// the backend runs the op itself
    Native,
    /// rewritten into primitives the backend runs
    Decomposed,
    /// neither; compiling for this device fails
    Unsupported,
}

impl How {
    /// Lowercase name, as in the table and JSON.
    pub fn name(self) -> &'static str {
        match self {
            How::Native => "native",
            How::Decomposed => "decomposed",
            How::Unsupported => "unsupported",
        }
    }
}

impl fmt::Display for How {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One op node of the graph and where it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchEntry {
    /// node name
    pub node: String,
    /// op name
    pub op: &'static str,
    /// device name
    pub device: String,
    /// native, decomposed or unsupported
    pub how: How,
    /// decomposed: the primitives used; unsupported: why; native: empty
    pub detail: String,
    /// result dtype
    pub dtype: DType,
    /// result shape
    pub shape: Shape,
}

/// Counts for one op kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpSummary {
    /// nodes run natively
    pub native: usize,
    /// nodes decomposed
    pub decomposed: usize,
    /// nodes that cannot run
    pub unsupported: usize,
}

/// Per-node dispatch decisions for one device. Leaves (inputs, params, constants) are not
/// ops and are not listed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DispatchReport {
    /// the device the graph was legalized for
    pub device: String,
    /// one entry per op node, in graph order
    pub entries: Vec<DispatchEntry>,
}

impl DispatchReport {
    /// An empty report for `device`.
    pub fn new(device: &str) -> DispatchReport {
        DispatchReport {
            device: device.to_string(),
            entries: Vec::new(),
        }
    }

    /// Counts per op name, sorted by name.
    pub fn summary(&self) -> BTreeMap<&'static str, OpSummary> {
        let mut out: BTreeMap<&'static str, OpSummary> = BTreeMap::new();
        for e in &self.entries {
            let s = out.entry(e.op).or_default();
            match e.how {
                How::Native => s.native += 1,
                How::Decomposed => s.decomposed += 1,
                How::Unsupported => s.unsupported += 1,
            }
        }
        out
    }

    /// Number of entries with the given disposition.
    pub fn count(&self, how: How) -> usize {
        self.entries.iter().filter(|e| e.how == how).count()
    }

    /// The report as JSON: `{device, nodes: [...], summary: {op: {native, decomposed,
    /// unsupported}}, totals: {...}}`.
    pub fn to_json(&self) -> Value {
        let nodes: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                json!({
                    "node": e.node,
                    "op": e.op,
                    "device": e.device,
                    "how": e.how.name(),
                    "detail": e.detail,
                    "dtype": e.dtype.name(),
                    "shape": e.shape.to_string(),
                })
            })
            .collect();
        let summary: serde_json::Map<String, Value> = self
            .summary()
            .into_iter()
            .map(|(op, s)| {
                let v = json!({
                    "native": s.native,
                    "decomposed": s.decomposed,
                    "unsupported": s.unsupported,
                });
                (op.to_string(), v)
            })
            .collect();
        json!({
            "device": self.device,
            "nodes": nodes,
            "summary": summary,
            "totals": {
                "native": self.count(How::Native),
                "decomposed": self.count(How::Decomposed),
                "unsupported": self.count(How::Unsupported),
            },
        })
    }
}

/// A table: one row per node, then one row per op kind.
impl fmt::Display for DispatchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "dispatch report for `{}`: {} native, {} decomposed, {} unsupported",
            self.device,
            self.count(How::Native),
            self.count(How::Decomposed),
            self.count(How::Unsupported)
        )?;
        let types: Vec<String> = self
            .entries
            .iter()
            .map(|e| format!("{}{}", e.dtype, e.shape))
            .collect();
        let w_node = column_width("node", self.entries.iter().map(|e| e.node.len()));
        let w_op = column_width("op", self.entries.iter().map(|e| e.op.len()));
        let w_ty = column_width("type", types.iter().map(String::len));
        let w_dev = column_width("device", self.entries.iter().map(|e| e.device.len()));
        writeln!(
            f,
            "{:w_node$}  {:w_op$}  {:w_ty$}  {:w_dev$}  {:11}  detail",
            "node", "op", "type", "device", "how"
        )?;
        for (e, ty) in self.entries.iter().zip(&types) {
            writeln!(
                f,
                "{:w_node$}  {:w_op$}  {:w_ty$}  {:w_dev$}  {:11}  {}",
                e.node,
                e.op,
                ty,
                e.device,
                e.how.name(),
                e.detail
            )?;
        }
        let summary = self.summary();
        let w_kind = column_width("op", summary.keys().map(|k| k.len()));
        writeln!(
            f,
            "\n{:w_kind$}  {:>6}  {:>10}  {:>11}",
            "op", "native", "decomposed", "unsupported"
        )?;
        for (op, s) in summary {
            writeln!(
                f,
                "{op:w_kind$}  {:>6}  {:>10}  {:>11}",
                s.native, s.decomposed, s.unsupported
            )?;
        }
        Ok(())
    }
}

fn column_width(title: &str, widths: impl Iterator<Item = usize>) -> usize {
    widths.max().unwrap_or(0).max(title.len())
}
