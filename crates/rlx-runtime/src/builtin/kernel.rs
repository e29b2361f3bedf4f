//! The adapter every kernel-IR device crate goes through to meet the [`Backend`] contract:
//! the runtime lowers the legalized graph to kernel IR with `rlx-opt`, the device crate
//! compiles and runs it. One copy of the contract's rules for all of them: without a driver
//! the backend is unavailable with the reason, claims no ops, and `compile` refuses with that
//! reason; a device error that means "unavailable" surfaces as [`DeviceError::Unavailable`].

use crate::{
    median_kernels, Backend, CompileOptions, Executable, ParamStore, RunProfile, RuntimeError,
};
use rlx_driver::{Availability, Device, DeviceError, DeviceInfo};
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{Graph, Op, Tensor, TensorType};
use std::collections::HashMap;
use std::sync::Arc;

/// What a device crate provides: probing, op support, and compiling kernel IR.
pub(crate) trait KernelDevice: Send + Sync + 'static {
    /// A compiled program.
    type Program: DeviceProgram<Error = Self::Error>;
    /// The crate's error type.
    type Error: std::fmt::Display;
    /// Driver and hardware present?
    fn availability(&self) -> Availability;
    /// Name, memory and so on, when present.
    fn info(&self) -> Option<DeviceInfo>;
    /// Whether the device runs `op` on inputs of these types (availability checked apart).
    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool;
    /// Compiles a lowered program.
    fn compile(&self, program: KernelProgram) -> Result<Self::Program, Self::Error>;
    /// The reason when `e` means the device is not there (no driver, no adapter).
    fn unavailable(e: &Self::Error) -> Option<String>;
}

/// A compiled program of a device crate.
pub(crate) trait DeviceProgram: Send + Sync + 'static {
    /// The crate's error type.
    type Error: std::fmt::Display;
    /// Runs once on host inputs and weights.
    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        weights: &HashMap<String, Arc<Tensor>>,
    ) -> Result<Vec<(String, Tensor)>, Self::Error>;
    /// Kernels launched per run.
    fn kernel_count(&self) -> usize;
    /// Bytes of the planned arena.
    fn arena_bytes(&self) -> usize;
    /// The program and its generated source, for `rlx dump`.
    fn dump(&self) -> String;
    /// Per kernel (name, kind, microseconds) of `runs` runs after one run on these inputs,
    /// and the clock; `None` when the device cannot time its kernels.
    fn profile(
        &self,
        _inputs: &HashMap<String, Tensor>,
        _weights: &HashMap<String, Arc<Tensor>>,
        _runs: usize,
    ) -> Result<Option<(KernelRuns, &'static str)>, Self::Error> {
        Ok(None)
    }
}

/// Per run, every kernel's (name, kind, microseconds).
pub(crate) type KernelRuns = Vec<Vec<(String, String, f64)>>;

/// A [`Backend`] for `device` served by the device crate `D`.
pub(crate) struct KernelBackend<D: KernelDevice> {
    device: Device,
    crate_: Arc<D>,
}

impl<D: KernelDevice> KernelBackend<D> {
    /// The backend of `device`, one per session (so device weights are shared by every
    /// graph the session compiles).
    pub(crate) fn boxed(device: Device, crate_: D) -> Box<dyn Backend> {
        Box::new(KernelBackend {
            device,
            crate_: Arc::new(crate_),
        })
    }
}

fn device_err<E: std::fmt::Display>(device: Device, e: E, reason: Option<String>) -> RuntimeError {
    match reason {
        Some(reason) => RuntimeError::Device(DeviceError::Unavailable { device, reason }),
        None => RuntimeError::Backend {
            device,
            message: e.to_string(),
        },
    }
}

impl<D: KernelDevice> Backend for KernelBackend<D> {
    fn device(&self) -> Device {
        self.device
    }

    fn availability(&self) -> Availability {
        self.crate_.availability()
    }

    fn info(&self) -> Option<DeviceInfo> {
        self.crate_.info()
    }

    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool {
        self.availability().available && self.crate_.supports(op, inputs)
    }

    fn compile(
        &self,
        graph: &Graph,
        _options: &CompileOptions,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        let avail = self.availability();
        if !avail.available {
            return Err(DeviceError::Unavailable {
                device: self.device,
                reason: avail.reason.unwrap_or_default(),
            }
            .into());
        }
        let program = rlx_opt::lower(graph)?;
        let program = self.crate_.compile(program).map_err(|e| {
            let reason = D::unavailable(&e);
            device_err(self.device, e, reason)
        })?;
        Ok(Box::new(KernelExecutable::<D> {
            device: self.device,
            program,
        }))
    }
}

struct KernelExecutable<D: KernelDevice> {
    device: Device,
    program: D::Program,
}

impl<D: KernelDevice> Executable for KernelExecutable<D> {
    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &ParamStore,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError> {
        let params = params.snapshot();
        self.program.run(inputs, &params).map_err(|e| {
            let reason = D::unavailable(&e);
            device_err(self.device, e, reason)
        })
    }

    fn kernel_count(&self) -> usize {
        self.program.kernel_count()
    }

    fn arena_bytes(&self) -> usize {
        self.program.arena_bytes()
    }

    fn dump(&self) -> String {
        self.program.dump()
    }

    fn profile(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &ParamStore,
        runs: usize,
    ) -> Result<Option<RunProfile>, RuntimeError> {
        let params = params.snapshot();
        let timed = self.program.profile(inputs, &params, runs).map_err(|e| {
            let reason = D::unavailable(&e);
            device_err(self.device, e, reason)
        })?;
        Ok(timed.map(|(all, clock)| RunProfile {
            kernels: median_kernels(&all),
            runs,
            clock,
        }))
    }
}
