//! What the Llama tests share: a [`SessionRunner`] over a fresh CPU session, and the token-id
//! reader of the SmolLM2 reference fixture.

use rlx_driver::Device;
use rlx_llm::SessionRunner;
use rlx_runtime::{CompileOptions, Session};

/// A runner on a fresh CPU session.
pub fn cpu_runner() -> SessionRunner {
    cpu_runner_with(CompileOptions::default())
}

/// A runner on a fresh CPU session compiling with `options`.
#[allow(dead_code)] // not every test file sets options
pub fn cpu_runner_with(options: CompileOptions) -> SessionRunner {
    SessionRunner::new(
        Session::new(Device::Cpu).expect("the CPU is always there"),
        options,
    )
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
