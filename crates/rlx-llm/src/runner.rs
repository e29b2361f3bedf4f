//! The generator's graphs compiled and run in one [`Session`].

use rlx_ir::{Graph, Tensor};
use rlx_models::llama::Runner;
use rlx_runtime::{CompileOptions, CompiledGraph, Session};
use std::collections::HashMap;
use std::sync::Arc;

/// Compiles and runs a [`rlx_models::llama::Generator`]'s graphs in one session.
pub struct SessionRunner {
    session: Session,
    options: CompileOptions,
    graphs: Vec<Option<CompiledGraph>>,
}

impl SessionRunner {
    /// A runner on `session` compiling with `options`.
    pub fn new(session: Session, options: CompileOptions) -> Self {
        SessionRunner {
            session,
            options,
            graphs: Vec::new(),
        }
    }
}

impl Runner for SessionRunner {
    fn set_param(&mut self, name: &str, value: Arc<Tensor>) {
        self.session.params().set(name, value);
    }

    fn compile(&mut self, graph: &Graph) -> Result<usize, String> {
        let g = self
            .session
            .compile(graph, self.options.clone())
            .map_err(|e| e.to_string())?;
        if let Some(free) = self.graphs.iter().position(Option::is_none) {
            self.graphs[free] = Some(g);
            return Ok(free);
        }
        self.graphs.push(Some(g));
        Ok(self.graphs.len() - 1)
    }

    fn release(&mut self, handle: usize) {
        if let Some(g) = self.graphs.get_mut(handle) {
            *g = None;
        }
    }

    fn run(
        &mut self,
        handle: usize,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<Vec<(String, Tensor)>, String> {
        match self.graphs.get(handle) {
            Some(Some(g)) => g.run(inputs).map_err(|e| e.to_string()),
            _ => Err(format!("no compiled graph {handle}")),
        }
    }
}
