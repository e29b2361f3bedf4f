//! What the Llama tests share: a `Runner` over a CPU `Session`, and the token-id reader of
//! the SmolLM2 reference fixture.

use rlx_driver::Device;
use rlx_ir::{Graph, Tensor};
use rlx_models::llama::Runner;
use rlx_runtime::{CompileOptions, CompiledGraph, Session};
use std::collections::HashMap;
use std::sync::Arc;

/// Compiles and runs the generator's graphs in one CPU session.
pub struct SessionRunner {
    session: Session,
    options: CompileOptions,
    graphs: Vec<CompiledGraph>,
}

impl SessionRunner {
    /// A runner on a fresh CPU session, default options.
    pub fn cpu() -> SessionRunner {
        SessionRunner::cpu_with(CompileOptions::default())
    }

    /// A runner on a fresh CPU session compiling with `options`.
    pub fn cpu_with(options: CompileOptions) -> SessionRunner {
        SessionRunner {
            session: Session::new(Device::Cpu).unwrap(),
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
        self.graphs.push(g);
        Ok(self.graphs.len() - 1)
    }
    fn run(
        &mut self,
        handle: usize,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<Vec<(String, Tensor)>, String> {
        self.graphs[handle].run(inputs).map_err(|e| e.to_string())
    }
}

/// Token ids of a JSON array.
#[allow(dead_code)] // not every test file reads the fixture
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}
