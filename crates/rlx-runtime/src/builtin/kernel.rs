//! The adapter every kernel-IR device crate goes through to meet the [`Backend`] contract:
//! the runtime lowers the legalized graph to kernel IR with `rlx-opt`, the device crate
//! compiles and runs it. One copy of the contract's rules for all of them: without a driver
//! the backend is unavailable with the reason, claims no ops, and `compile` refuses with that
//! reason; a device error that means "unavailable" surfaces as [`DeviceError::Unavailable`].

use crate::backend::{no_kernel_passes, unsupported};
use crate::{
    median_kernels, Backend, BoundValue, CompileOptions, DeviceBuffer, Executable, ParamStore,
    RawHandle, RunProfile, RuntimeError,
};
use rlx_driver::{Availability, Device, DeviceError, DeviceInfo};
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{DType, Graph, Op, Tensor, TensorType};
use std::any::Any;
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
    /// The device crate's knobs with their values now.
    fn settings(&self) -> Vec<rlx_driver::Setting>;
    /// Whether the device runs `op` on inputs of these types (availability checked apart).
    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool;
    /// Whether mixed precision stores activations low too (see
    /// [`Backend::low_precision_activations`]).
    fn low_precision_activations(&self) -> bool {
        false
    }
    /// Compiles a lowered program.
    fn compile(&self, program: KernelProgram) -> Result<Self::Program, Self::Error>;
    /// What the kernel-IR passes the device's planner chooses decide, up to `pass` (see
    /// [`Backend::kernel_decisions`]; computed without the device). Default: none chosen.
    fn kernel_decisions(
        &self,
        program: &KernelProgram,
        pass: &str,
    ) -> Option<Result<String, Self::Error>> {
        let _ = (program, pass);
        None
    }
    /// The reason when `e` means the device is not there (no driver, no adapter).
    fn unavailable(e: &Self::Error) -> Option<String>;
    /// The device's buffer operations, where it has them.
    fn buffers(&self) -> Option<&dyn DeviceBuffers> {
        None
    }
}

/// Device buffers of a device crate: what [`Backend::alloc`] and its neighbours forward to
/// (`device` is the one the backend serves). Errors are the runtime's, already naming the
/// device.
pub(crate) trait DeviceBuffers: Send + Sync {
    /// See [`Backend::alloc`].
    fn alloc(
        &self,
        device: Device,
        dtype: DType,
        shape: &[usize],
    ) -> Result<DeviceBuffer, RuntimeError>;
    /// See [`Backend::wrap`].
    ///
    /// # Safety
    /// As [`Backend::wrap`].
    unsafe fn wrap(
        &self,
        device: Device,
        handle: RawHandle,
        dtype: DType,
        shape: &[usize],
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<DeviceBuffer, RuntimeError>;
    /// See [`Backend::upload`].
    fn upload(&self, dst: &DeviceBuffer, src: &Tensor) -> Result<(), RuntimeError>;
    /// See [`Backend::download`].
    fn download(&self, src: &DeviceBuffer) -> Result<Tensor, RuntimeError>;
    /// See [`Backend::copy`].
    fn copy(&self, src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<(), RuntimeError>;
    /// See [`Backend::memory`].
    fn memory(&self) -> Option<rlx_mem::Stats>;
    /// See [`Backend::interop_stream`].
    fn interop_stream(&self) -> Option<u64> {
        None
    }
}

/// Checks a copy's sizes: the same number of bytes on both sides.
pub(crate) fn check_copy(src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<(), RuntimeError> {
    if src.byte_size() != dst.byte_size() {
        return Err(RuntimeError::Buffer(format!(
            "copy from {}{:?} ({} bytes) into {}{:?} ({} bytes)",
            src.dtype(),
            src.shape(),
            src.byte_size(),
            dst.dtype(),
            dst.shape(),
            dst.byte_size()
        )));
    }
    Ok(())
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
    /// The device allocator's statistics, where it has a pool.
    fn memory(&self) -> Option<rlx_mem::Stats> {
        None
    }
    /// Runs with bound inputs and output buffers (see [`Executable::run_bound`]).
    fn run_bound(
        &self,
        device: Device,
        inputs: &HashMap<String, BoundValue>,
        weights: &HashMap<String, Arc<Tensor>>,
        outputs: &[(String, DeviceBuffer)],
    ) -> Result<(), RuntimeError> {
        let _ = (inputs, weights, outputs);
        Err(unsupported(device, "running with bound device buffers"))
    }
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

/// A device crate's error as the runtime's: unavailable with its reason, or a backend
/// failure with its message.
pub(crate) fn device_err<E: std::fmt::Display>(
    device: Device,
    e: E,
    reason: Option<String>,
) -> RuntimeError {
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

    fn settings(&self) -> Vec<rlx_driver::Setting> {
        self.crate_.settings()
    }

    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool {
        self.availability().available && self.crate_.supports(op, inputs)
    }

    fn low_precision_activations(&self) -> bool {
        self.crate_.low_precision_activations()
    }

    fn lowers(&self, op: &Op, inputs: &[&TensorType]) -> bool {
        self.crate_.supports(op, inputs)
    }

    fn kernel_decisions(
        &self,
        program: &KernelProgram,
        pass: &str,
    ) -> Result<String, RuntimeError> {
        match self.crate_.kernel_decisions(program, pass) {
            Some(r) => r.map_err(|e| {
                let reason = D::unavailable(&e);
                device_err(self.device, e, reason)
            }),
            None => no_kernel_passes(program, pass),
        }
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

    fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<DeviceBuffer, RuntimeError> {
        self.buffers("allocating device buffers")?
            .alloc(self.device, dtype, shape)
    }

    unsafe fn wrap(
        &self,
        handle: RawHandle,
        dtype: DType,
        shape: &[usize],
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<DeviceBuffer, RuntimeError> {
        let b = self.buffers("wrapping foreign memory")?;
        // SAFETY: the caller's contract is the same.
        unsafe { b.wrap(self.device, handle, dtype, shape, owner) }
    }

    fn upload(&self, dst: &DeviceBuffer, src: &Tensor) -> Result<(), RuntimeError> {
        crate::check_same("upload", dst, src)?;
        self.buffers("uploading to device buffers")?
            .upload(dst, src)
    }

    fn download(&self, src: &DeviceBuffer) -> Result<Tensor, RuntimeError> {
        self.buffers("downloading device buffers")?.download(src)
    }

    fn copy(&self, src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<(), RuntimeError> {
        check_copy(src, dst)?;
        self.buffers("copying device buffers")?.copy(src, dst)
    }

    fn memory(&self) -> Option<rlx_mem::Stats> {
        self.crate_.buffers().and_then(|b| b.memory())
    }

    fn interop_stream(&self) -> Option<u64> {
        self.crate_.buffers().and_then(|b| b.interop_stream())
    }
}

impl<D: KernelDevice> KernelBackend<D> {
    /// The device's buffer operations, checked available first.
    fn buffers(&self, what: &str) -> Result<&dyn DeviceBuffers, RuntimeError> {
        let avail = self.availability();
        if !avail.available {
            return Err(DeviceError::Unavailable {
                device: self.device,
                reason: avail.reason.unwrap_or_default(),
            }
            .into());
        }
        self.crate_
            .buffers()
            .ok_or_else(|| unsupported(self.device, what))
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

    fn run_bound(
        &self,
        inputs: &HashMap<String, BoundValue>,
        outputs: &[(String, DeviceBuffer)],
        params: &ParamStore,
    ) -> Result<(), RuntimeError> {
        let params = params.snapshot();
        self.program
            .run_bound(self.device, inputs, &params, outputs)
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

    fn memory(&self) -> Option<rlx_mem::Stats> {
        self.program.memory()
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
