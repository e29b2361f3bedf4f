//! The shared skeleton of every graph pass: walk the old graph in order and build a new one,
//! remembering which new node stands for each old node.

use rlx_ir::{Graph, IrError, Node, NodeId, Op};

/// A new graph under construction plus the old-to-new node map.
pub(crate) struct Rebuild<'a> {
    /// the graph being rewritten
    pub old: &'a Graph,
    /// the graph being built
    pub new: Graph,
    map: Vec<Option<NodeId>>,
}

impl<'a> Rebuild<'a> {
    /// Starts an empty rebuild of `old`.
    pub fn new(old: &'a Graph) -> Self {
        Rebuild {
            old,
            new: Graph::new(),
            map: vec![None; old.nodes().len()],
        }
    }

    /// The new node that stands for old node `id`.
    ///
    /// Panics when `id` has not been mapped yet: passes walk in topological order, so an
    /// unmapped input is a broken invariant.
    pub fn get(&self, id: NodeId) -> NodeId {
        self.map[id.0].expect("inputs are mapped before their users")
    }

    /// The new ids of an old node's inputs.
    pub fn inputs(&self, node: &Node) -> Vec<NodeId> {
        node.inputs.iter().map(|&i| self.get(i)).collect()
    }

    /// Records that old node `old_id` is now `new_id`.
    pub fn set(&mut self, old_id: NodeId, new_id: NodeId) {
        self.map[old_id.0] = Some(new_id);
    }

    /// Copies a leaf unchanged and maps it.
    pub fn copy_leaf(&mut self, old_id: NodeId) -> NodeId {
        let node = self.old.node(old_id).clone();
        debug_assert!(node.op.is_leaf());
        let id = self.new.push_node(node);
        self.set(old_id, id);
        id
    }

    /// Adds `op` over new-graph inputs with type inference, keeping the old node's name.
    ///
    /// # Errors
    /// Inference failures, which mean the pass built something inconsistent.
    pub fn push(&mut self, op: Op, inputs: &[NodeId], name: &str) -> Result<NodeId, IrError> {
        self.new.push(op, inputs, Some(name))
    }

    /// Copies old node `old_id` with its inputs remapped.
    ///
    /// # Errors
    /// Inference failures (the remapped inputs changed type, a pass bug).
    pub fn copy(&mut self, old_id: NodeId) -> Result<NodeId, IrError> {
        let old = self.old;
        let node = old.node(old_id);
        if node.op.is_leaf() {
            return Ok(self.copy_leaf(old_id));
        }
        let inputs = self.inputs(node);
        let id = self.push(node.op.clone(), &inputs, &node.name)?;
        self.set(old_id, id);
        Ok(id)
    }

    /// Re-declares the old graph's outputs on the new graph and returns it.
    pub fn finish(mut self) -> Graph {
        for (name, id) in self.old.outputs() {
            let new_id = self.get(*id);
            self.new.output(name, new_id);
        }
        self.new
    }
}
