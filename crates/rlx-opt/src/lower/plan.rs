//! The fusion plan: which nodes get their own kernel and buffer (roots), which are computed
//! inline inside the kernels that read them, and which reductions or library ops are fused
//! into an elementwise epilogue.
//!
//! Rules, decided once over the whole graph:
//! - outputs, library ops and reductions are roots; library operands must be buffers;
//! - an elementwise node is inline when exactly one kernel reads it (layout ops in between
//!   count as the kernels reading *them*). With several readers it is a root, computed
//!   once, unless it is one cheap op over buffers (`x - mean`), which is recomputed — but
//!   not when it is the only reader of a same-shape library op, whose epilogue it becomes;
//! - an expensive elementwise node (exp, erf, ...) that a reader broadcasts is a root, so
//!   it is not recomputed per broadcast element;
//! - layout ops are views unless they are outputs or library operands; a reshape that
//!   merges dims needs its source in a buffer (then it is an alias of that buffer);
//! - a reduction or library op is fused into an elementwise root kernel when all its
//!   readers reach that one root through same-shape elementwise nodes (`gelu(x @ w + b)`,
//!   where the decomposed gelu reads `x @ w + b` twice); failing that, when its only reader
//!   starts a chain of same-shape elementwise nodes, each the only reader of the one before,
//!   the chain's last node becomes a root and takes it (`rsqrt(mean(x^2) + eps)`).
//!
//! The cheap-op exception above is the `fuse_bias` rule ([`Plan::fused_biases`], shown by
//! `rlx dump --after <kernel pass>`). It is a rule of lowering, not a kernel-IR pass, because
//! it decides the program's kernels rather than how a backend runs them: with it, the GEMM
//! is a library kernel whose epilogue adds the bias into the one buffer its readers copy
//! from (plain copies, which `elide_views` can elide and whose GEMM `merge_siblings` can
//! merge); without it, the GEMM writes its bare result and each reader is a loop kernel that
//! adds its slice of the bias itself. Kernel passes only return decisions over a fixed
//! program, which every backend's planner follows, or not; this one would have to rewrite
//! the bodies of the library kernel and of every reader, for every backend (wgpu and the
//! reference interpreter run the program as lowered), and nothing depends on a backend's
//! capability: every backend runs a library kernel's epilogue.

use rlx_ir::{BinaryOp, Graph, NodeId, Op, UnaryOp};

/// What kind of kernel work an op is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// input, param, constant
    Leaf,
    /// unary, binary, where, cast
    Elementwise,
    /// transpose, expand, slice, reshape
    Layout,
    /// reduce over axes
    Reduce,
    /// run by a library or template kernel
    Library,
}

/// The kind of every op. Exhaustive: a new op must pick one.
pub(crate) fn kind(op: &Op) -> Kind {
    match op {
        Op::Input { .. } | Op::Param { .. } | Op::Constant(_) => Kind::Leaf,
        Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast(_) => Kind::Elementwise,
        Op::Transpose(_) | Op::Expand(_) | Op::Slice { .. } | Op::Reshape(_) => Kind::Layout,
        Op::Reduce { .. } => Kind::Reduce,
        Op::ArgReduce { .. }
        | Op::BitCast(_)
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::MatMul
        | Op::Conv2d(_)
        | Op::Pool2d(_)
        | Op::GlobalPool(_)
        | Op::Concat { .. }
        | Op::Gather { .. }
        | Op::Pad { .. }
        | Op::Attention { .. }
        | Op::QuantMatMul { .. }
        | Op::MatMulInteger(_)
        | Op::ConvInteger(_) => Kind::Library,
    }
}

/// How a node is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// a leaf buffer
    Leaf,
    /// its own kernel (or an alias, for a reshape of a buffer) and buffer
    Root,
    /// computed inside the kernels that read it
    Inline,
    /// a reduction or library op fused into the kernel of this root
    Absorbed(NodeId),
    /// reaches no output; not computed
    Dead,
}

/// The decisions for a whole graph.
pub(crate) struct Plan {
    /// role per node
    pub roles: Vec<Role>,
    /// per root: the reduction or library node fused into it, if any
    pub absorbs: Vec<Option<NodeId>>,
    /// the `fuse_bias` rule's decisions, in graph order: (library node, the cheap op read by
    /// several kernels that became its epilogue), where without the rule the op would be
    /// recomputed in each reader
    pub fused_biases: Vec<(NodeId, NodeId)>,
}

/// Decides roles for every node of `g` (static shapes assumed).
pub(crate) fn plan(g: &Graph) -> Plan {
    let nodes = g.nodes();
    let n = nodes.len();
    let mut users: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for (idx, node) in nodes.iter().enumerate() {
        for &i in &node.inputs {
            if !users[i.0].contains(&NodeId(idx)) {
                users[i.0].push(NodeId(idx));
            }
        }
    }
    let mut is_output = vec![false; n];
    for (_, id) in g.outputs() {
        is_output[id.0] = true;
    }
    let live = liveness(g, &is_output);
    let numel = |id: NodeId| g.ty(id).shape.numel().unwrap_or(0);
    let mut need_buffer = vec![false; n];
    let mut root = vec![false; n];
    // The kernels (by root node) an inline node's expression lands in; a layout reader adds
    // its own id, since it reads the node under another index map.
    let mut tokens: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    // roots only because they end a library op (the `fuse_bias` rule)
    let mut by_bias_rule = vec![false; n];
    for idx in (0..n).rev() {
        let node = &nodes[idx];
        if !live[idx] {
            continue;
        }
        match kind(&node.op) {
            Kind::Leaf => {}
            Kind::Library => {
                root[idx] = true;
                for &i in &node.inputs {
                    need_buffer[i.0] = true;
                }
            }
            Kind::Reduce => root[idx] = true,
            Kind::Elementwise | Kind::Layout => {
                let mut t: Vec<NodeId> = Vec::new();
                for &u in &users[idx] {
                    let k = kind(&g.node(u).op);
                    if root[u.0] || matches!(k, Kind::Reduce | Kind::Library) {
                        t.push(u);
                    } else if k == Kind::Layout {
                        t.push(u);
                        if tokens[u.0].len() > 1 {
                            t.extend(&tokens[u.0]);
                        }
                    } else {
                        t.extend(&tokens[u.0]);
                    }
                }
                t.sort();
                t.dedup();
                root[idx] = is_output[idx] || need_buffer[idx];
                if kind(&node.op) == Kind::Elementwise {
                    // A cheap op with several readers is recomputed in each, unless it is the
                    // only reader of a same-shape library op: as that op's epilogue it runs
                    // once and needs no buffer more (`x @ w + b` read by q, k, v head splits,
                    // which are then plain copies a backend can read through)
                    let ends_library = node.inputs.iter().any(|&i| {
                        kind(&g.node(i).op) == Kind::Library
                            && users[i.0] == [NodeId(idx)]
                            && !is_output[i.0]
                            && g.ty(i).shape == g.ty(NodeId(idx)).shape
                    });
                    let dup = duplicable(g, NodeId(idx));
                    let shared = t.len() > 1 && (!dup || ends_library);
                    let broadcast = !is_cheap(&node.op)
                        && users[idx].iter().any(|&u| numel(u) > numel(NodeId(idx)));
                    by_bias_rule[idx] = shared && dup && !root[idx] && !broadcast;
                    root[idx] |= shared || broadcast;
                } else if let Op::Reshape(_) = node.op {
                    let from = static_dims(g, node.inputs[0]);
                    let to = static_dims(g, NodeId(idx));
                    if super::index_map::split_groups(&from, &to).is_none() {
                        need_buffer[node.inputs[0].0] = true;
                    }
                }
                tokens[idx] = if root[idx] { vec![NodeId(idx)] } else { t };
            }
        }
    }
    let mut absorbs = vec![None; n];
    let mut absorbed = vec![None; n];
    for idx in 0..n {
        let k = kind(&nodes[idx].op);
        if !live[idx] || !matches!(k, Kind::Reduce | Kind::Library) {
            continue;
        }
        if is_output[idx] || need_buffer[idx] {
            continue;
        }
        let m = NodeId(idx);
        let end = epilogue_root(g, &users, &root, m).or_else(|| {
            let end = epilogue_chain_end(g, &users, &root, &tokens, m)?;
            root[end.0] = true;
            Some(end)
        });
        if let Some(e) = end.filter(|e| absorbs[e.0].is_none()) {
            root[idx] = false;
            absorbs[e.0] = Some(m);
            absorbed[idx] = Some(e);
        }
    }
    let fused_biases = (0..n)
        .filter(|&i| by_bias_rule[i])
        .filter_map(|i| Some((absorbs[i]?, NodeId(i))))
        .collect();
    let roles = (0..n)
        .map(|idx| {
            if !live[idx] {
                Role::Dead
            } else if kind(&nodes[idx].op) == Kind::Leaf {
                Role::Leaf
            } else if let Some(e) = absorbed[idx] {
                Role::Absorbed(e)
            } else if root[idx] {
                Role::Root
            } else {
                Role::Inline
            }
        })
        .collect();
    Plan {
        roles,
        absorbs,
        fused_biases,
    }
}

/// The existing root kernel that every reader of `m` feeds through same-shape elementwise
/// nodes, if there is exactly one: `m` can then run as that kernel's prologue (a reduction)
/// or be read by its epilogue (a library op) without a buffer of its own.
fn epilogue_root(g: &Graph, users: &[Vec<NodeId>], root: &[bool], m: NodeId) -> Option<NodeId> {
    let shape = &g.ty(m).shape;
    let mut target = None;
    let mut seen = vec![false; users.len()];
    let mut stack = users[m.0].clone();
    while let Some(u) = stack.pop() {
        if std::mem::replace(&mut seen[u.0], true) {
            continue;
        }
        if kind(&g.node(u).op) != Kind::Elementwise || &g.ty(u).shape != shape {
            return None;
        }
        if root[u.0] {
            if target.is_some_and(|t| t != u) {
                return None;
            }
            target = Some(u);
        } else {
            stack.extend(&users[u.0]);
        }
    }
    target
}

/// The last node of the chain of same-shape elementwise nodes that starts at `m`'s only
/// reader, each the only reader of the one before; that node becomes a root.
fn epilogue_chain_end(
    g: &Graph,
    users: &[Vec<NodeId>],
    root: &[bool],
    tokens: &[Vec<NodeId>],
    m: NodeId,
) -> Option<NodeId> {
    let mut cur = m;
    let mut end = None;
    while let [u] = users[cur.0][..] {
        let fits = kind(&g.node(u).op) == Kind::Elementwise
            && g.ty(u).shape == g.ty(m).shape
            && (root[u.0] || tokens[u.0].len() <= 1);
        if !fits {
            break;
        }
        end = Some(u);
        cur = u;
        if root[u.0] {
            break;
        }
    }
    end
}

fn liveness(g: &Graph, is_output: &[bool]) -> Vec<bool> {
    let mut live = is_output.to_vec();
    for idx in (0..g.nodes().len()).rev() {
        if live[idx] {
            for i in &g.nodes()[idx].inputs {
                live[i.0] = true;
            }
        }
    }
    live
}

fn static_dims(g: &Graph, id: NodeId) -> Vec<usize> {
    g.ty(id)
        .shape
        .as_static()
        .expect("lowering checks static shapes first")
}

/// One arithmetic instruction at most: worth recomputing rather than storing.
fn is_cheap(op: &Op) -> bool {
    match op {
        Op::Binary(b) => *b != BinaryOp::Pow && *b != BinaryOp::Div,
        Op::Unary(u) => matches!(
            u,
            UnaryOp::Neg
                | UnaryOp::Abs
                | UnaryOp::Relu
                | UnaryOp::Not
                | UnaryOp::Sign
                | UnaryOp::Floor
                | UnaryOp::Ceil
                | UnaryOp::Round
        ),
        Op::Where | Op::Cast(_) => true,
        _ => false,
    }
}

/// A cheap op whose operands are all buffers (leaves, reductions, library results, or views
/// of those): recomputing it in each reader costs one instruction and a few loads.
fn duplicable(g: &Graph, id: NodeId) -> bool {
    is_cheap(&g.node(id).op) && g.node(id).inputs.iter().all(|&i| is_buffer_like(g, i))
}

fn is_buffer_like(g: &Graph, id: NodeId) -> bool {
    let node = g.node(id);
    match kind(&node.op) {
        Kind::Leaf | Kind::Reduce | Kind::Library => true,
        Kind::Layout => is_buffer_like(g, node.inputs[0]),
        Kind::Elementwise => false,
    }
}
