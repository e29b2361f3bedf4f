//! Adapter from the `rlx-cpu` crate to the [`Backend`] contract: lowers the legalized
//! graph to kernel IR with `rlx-opt` and compiles it with the CPU fast path.

use crate::{
    median_kernels, Backend, CompileOptions, Executable, ParamStore, RunProfile, RuntimeError,
};
use rlx_cpu::{CpuOptions, CpuProgram};
use rlx_driver::{Availability, Device, DeviceInfo};
use rlx_ir::{Graph, Op, Tensor, TensorType};
use std::collections::HashMap;

/// The CPU backend: every op natively, fast kernels for the hot ones.
pub struct CpuBackend;

pub(crate) fn factory() -> Box<dyn Backend> {
    Box::new(CpuBackend)
}

impl Backend for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn availability(&self) -> Availability {
        Availability::yes()
    }

    fn info(&self) -> Option<DeviceInfo> {
        Some(DeviceInfo {
            name: rlx_cpu::cpu_name(),
            memory_bytes: None,
            compute_units: Some(rlx_cpu::thread_count() as u32),
            arch: Some(std::env::consts::ARCH.to_string()),
            software: false,
        })
    }

    fn supports(&self, op: &Op, _inputs: &[&TensorType]) -> bool {
        !matches!(op, Op::Input { .. } | Op::Param { .. })
    }

    fn const_eval(&self, op: &Op, inputs: &[&Tensor]) -> Option<Tensor> {
        rlx_cpu::eval_op(op, inputs).ok()
    }

    /// Matmuls by a weight only: they run on AMX tiles (bf16) where the CPU has them;
    /// attention, conv2d and products of two activations compute in f32 whatever their
    /// operands, so casting those would only round.
    fn low_precision_product(&self, op: &Op, weight: bool) -> bool {
        matches!(op, Op::MatMul) && weight
    }

    fn compile(
        &self,
        graph: &Graph,
        options: &CompileOptions,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        let program = rlx_opt::lower(graph)?;
        let dump = program.to_string();
        let kernels = program.kernels.len();
        let opts = CpuOptions {
            threads: options.threads,
            exact_quant: options.exact_quant,
        };
        let program = CpuProgram::compile(program, &opts).map_err(backend_err)?;
        Ok(Box::new(CpuExecutable {
            program,
            dump,
            kernels,
        }))
    }
}

fn backend_err(e: rlx_cpu::CpuError) -> RuntimeError {
    RuntimeError::Backend {
        device: Device::Cpu,
        message: e.to_string(),
    }
}

struct CpuExecutable {
    program: CpuProgram,
    dump: String,
    kernels: usize,
}

impl Executable for CpuExecutable {
    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &ParamStore,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError> {
        let params = params.snapshot();
        self.program.run(inputs, &params).map_err(backend_err)
    }

    fn kernel_count(&self) -> usize {
        self.kernels
    }

    fn arena_bytes(&self) -> usize {
        self.program.arena_bytes()
    }

    fn dump(&self) -> String {
        self.dump.clone()
    }

    fn profile(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &ParamStore,
        runs: usize,
    ) -> Result<Option<RunProfile>, RuntimeError> {
        let params = params.snapshot();
        self.program.run(inputs, &params).map_err(backend_err)?;
        let mut all = Vec::with_capacity(runs);
        for _ in 0..runs {
            let p = self
                .program
                .run_profiled(inputs, &params)
                .map_err(backend_err)?;
            all.push(
                p.timings
                    .into_iter()
                    .map(|k| (k.name, k.kind.to_string(), k.seconds * 1e6))
                    .collect(),
            );
        }
        Ok(Some(RunProfile {
            kernels: median_kernels(&all),
            runs,
            clock: "cpu wall clock",
        }))
    }
}
