//! How a row-parallel kernel (reductions, softmax, norms, global pooling) spreads its rows
//! over invocations and combines the partial results of one row.
//!
//! Without subgroup operations, `T` invocations share a row (1 for short rows, up to the
//! whole workgroup for long ones) and combine through a workgroup-memory tree. With them
//! (wgpu's SUBGROUP), a subgroup takes a row and combines with `subgroupAdd`/`subgroupMax`/...
//! (no workgroup memory, no barriers); the longest rows take the whole workgroup: each
//! subgroup combines its lanes, then every lane folds the subgroups' partials from
//! workgroup memory. Subgroup sizes are read at run time (`subgroup_size`, `subgroup_id`,
//! `num_subgroups`), so no layout of invocations into subgroups is assumed.

use super::scalar::{self, compute};
use super::{groups_for, main_sig, Target, WG};
use rlx_ir::{DType, ReduceOp};

/// Invocations per output row of a reduction of `len` points (1 means one invocation per
/// row, no combining).
pub fn lanes_for(len: usize, dtype: DType) -> usize {
    if len <= 32 || dtype == DType::Bool {
        1
    } else if len <= 256 {
        32
    } else if len <= 2048 {
        64
    } else {
        WG
    }
}

/// Statements combining `acc` over the `t` lanes of each row group through workgroup
/// array `sh` (all lanes then read the result from `{sh}[grp * t]`). Must run in uniform
/// control flow.
pub fn tree(sh: &str, t: usize, comb: &dyn Fn(&str, &str) -> String) -> String {
    let mut s = format!("{sh}[lid] = acc;\nworkgroupBarrier();\n");
    let mut step = t / 2;
    while step >= 1 {
        s += &format!(
            "if (lane < {step}) {{ {sh}[lid] = {}; }}\nworkgroupBarrier();\n",
            comb(&format!("{sh}[lid]"), &format!("{sh}[lid + {step}]"))
        );
        step /= 2;
    }
    s
}

/// The fold of every active invocation's `v` in the subgroup, as an expression every
/// invocation gets: NaN wins for float max/min as in [`scalar::combine`], i8/u8 wrap.
pub fn subgroup_fold(op: ReduceOp, dtype: DType, v: &str) -> String {
    let w = |s: String| scalar::wrap(dtype, s);
    match (op, compute(dtype)) {
        (ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Max, "bool") => format!("subgroupAny({v})"),
        (ReduceOp::Prod | ReduceOp::Min, "bool") => format!("subgroupAll({v})"),
        (ReduceOp::Sum | ReduceOp::Mean, _) => w(format!("subgroupAdd({v})")),
        (ReduceOp::Prod, _) => w(format!("subgroupMul({v})")),
        (ReduceOp::Max, "f32") => {
            format!("select(subgroupMax({v}), rlx_nan(), subgroupAny(rlx_isnan({v})))")
        }
        (ReduceOp::Min, "f32") => {
            format!("select(subgroupMin({v}), rlx_nan(), subgroupAny(rlx_isnan({v})))")
        }
        (ReduceOp::Max, _) => format!("subgroupMax({v})"),
        (ReduceOp::Min, _) => format!("subgroupMin({v})"),
    }
}

/// How rows map onto invocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// `t` invocations per row, combined through a workgroup-memory tree
    Tree(usize),
    /// one subgroup per row, combined with subgroup operations
    Subgroup,
    /// the whole workgroup per row: subgroup operations, then one partial per subgroup
    /// through workgroup memory
    Workgroup,
}

/// The skeleton of a kernel whose rows are combined across invocations.
///
/// [`Frame::head`] opens `main` and a grid-stride loop over rows defining `row` (i32),
/// `live` (this invocation's row exists), `lane` and `lanes` (the invocation's index among
/// the row's invocations and their count, for `for (j = lane; j < len; j += lanes)`);
/// [`Frame::combine`] folds every lane's `acc` into a value all of them see;
/// [`Frame::tail`] closes both.
#[derive(Debug, Clone)]
pub struct Frame {
    /// the mapping
    pub rows: Rows,
    /// workgroups to dispatch
    pub groups: u32,
    count: usize,
    acc_ty: &'static str,
}

impl Frame {
    /// A frame over `count` rows of `len` points each, accumulating in `dtype`'s compute
    /// type. `lanes` must be more than 1 (see [`lanes_for`]).
    pub fn new(count: usize, lanes: usize, dtype: DType, target: &Target) -> Frame {
        let rows = match (target.subgroups && compute(dtype) != "bool", lanes >= WG) {
            (false, _) => Rows::Tree(lanes.clamp(2, WG)),
            (true, false) => Rows::Subgroup,
            (true, true) => Rows::Workgroup,
        };
        let per_group = match rows {
            Rows::Tree(t) => WG / t,
            // Rows per workgroup with 32-wide subgroups; other sizes loop more or idle.
            Rows::Subgroup => WG / 32,
            Rows::Workgroup => 1,
        };
        Frame {
            rows,
            groups: groups_for(count, per_group, target),
            count,
            acc_ty: compute(dtype),
        }
    }

    /// Module declarations, `main` and the row loop's header.
    pub fn head(&self) -> String {
        let n = self.count;
        let groups = self.groups;
        match self.rows {
            Rows::Tree(t) => format!(
                "var<workgroup> sh: array<{acc}, {WG}>;\n{sig}\
                 let grp = lid / {t};\nlet lane = lid % {t};\nlet lanes = {t};\n\
                 for (var base: i32 = i32(wg.x) * {per}; base < {n}; base += {step}) {{\n\
                 let row = base + grp;\nlet live = row < {n};\n",
                acc = self.acc_ty,
                sig = main_sig(WG),
                per = WG / t,
                step = groups as usize * (WG / t),
            ),
            Rows::Subgroup => format!(
                "{sig}let lane = i32(sid_u);\nlet lanes = i32(ssz_u);\n\
                 for (var row: i32 = i32(wg.x * nsg_u + sgid_u); row < {n}; row += i32({groups}u * nsg_u)) {{\n\
                 let live = true;\n",
                sig = subgroup_sig(WG),
            ),
            Rows::Workgroup => format!(
                "var<workgroup> sh: array<{acc}, {WG}>;\n{sig}let lane = lid;\nlet lanes = {WG};\n\
                 for (var row: i32 = i32(wg.x); row < {n}; row += {groups}) {{\n\
                 let live = true;\n",
                acc = self.acc_ty,
                sig = subgroup_sig(WG),
            ),
        }
    }

    /// Statements folding every lane's `acc` of the row with `op` over `dtype` into
    /// `let {name}`, seen by all of the row's lanes. Runs in the row loop's own control
    /// flow (never under `if (live)`): it may hold barriers.
    pub fn combine(&self, name: &str, op: ReduceOp, dtype: DType) -> String {
        let comb = |a: &str, b: &str| scalar::combine(op, dtype, a, b);
        match self.rows {
            Rows::Tree(t) => format!(
                "{}let {name} = sh[grp * {t}];\nworkgroupBarrier();\n",
                tree("sh", t, &comb)
            ),
            Rows::Subgroup => format!("let {name} = {};\n", subgroup_fold(op, dtype, "acc")),
            Rows::Workgroup => format!(
                "let {name}_p = {};\nif (sid_u == 0u) {{ sh[sgid_u] = {name}_p; }}\nworkgroupBarrier();\n\
                 var {name}_v: {acc} = {ident};\n\
                 for (var s: u32 = 0u; s < nsg_u; s += 1u) {{ {name}_v = {fold}; }}\n\
                 workgroupBarrier();\nlet {name} = {name}_v;\n",
                subgroup_fold(op, dtype, "acc"),
                acc = self.acc_ty,
                ident = scalar::identity(op, dtype),
                fold = comb(&format!("{name}_v"), "sh[s]"),
            ),
        }
    }

    /// Closes the row loop and `main`.
    pub fn tail(&self) -> &'static str {
        "}\n}\n"
    }
}

/// The `main` signature with the subgroup builtins: `sid_u` (invocation in its subgroup),
/// `ssz_u` (subgroup size), `sgid_u` (subgroup in the workgroup), `nsg_u` (subgroups).
pub fn subgroup_sig(threads: usize) -> String {
    format!(
        "@compute @workgroup_size({threads})\nfn main(@builtin(workgroup_id) wg: vec3<u32>, \
         @builtin(local_invocation_index) lid_u: u32, @builtin(subgroup_invocation_id) sid_u: u32, \
         @builtin(subgroup_size) ssz_u: u32, @builtin(subgroup_id) sgid_u: u32, \
         @builtin(num_subgroups) nsg_u: u32) {{\nlet lid = i32(lid_u);\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_follow_the_target() {
        let mut t = Target::webgpu_defaults();
        assert_eq!(Frame::new(10, 64, DType::F32, &t).rows, Rows::Tree(64));
        t.subgroups = true;
        assert_eq!(Frame::new(10, 64, DType::F32, &t).rows, Rows::Subgroup);
        assert_eq!(Frame::new(10, WG, DType::F32, &t).rows, Rows::Workgroup);
        assert!(Frame::new(10, WG, DType::F32, &t)
            .combine("m", ReduceOp::Max, DType::F32)
            .contains("subgroupMax"));
    }
}
