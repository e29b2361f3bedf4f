//! `rlx-cuda` behind the kernel-IR adapter: NVRTC-generated kernels and cuBLASLt.

use super::kernel::{
    device_err, DeviceBuffers, DeviceProgram, KernelBackend, KernelDevice, KernelRuns,
};
use crate::{Backend, BoundValue, BufferStorage, DeviceBuffer, RawHandle, RuntimeError};
use rlx_cuda::device::CudaDevice;
use rlx_cuda::memory::DeviceMemory;
use rlx_cuda::staging::StagingPool;
use rlx_cuda::weights::{tensor_bytes, WeightCache};
use rlx_cuda::{BoundInput, CudaError, CudaOptions, CudaProgram};
use rlx_driver::{Availability, Device, DeviceInfo};
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{DType, Op, Tensor, TensorData, TensorType};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

/// The CUDA device crate with the session's device weights.
struct Cuda {
    weights: WeightCache,
    options: CudaOptions,
}

pub(crate) fn factory() -> Box<dyn Backend> {
    let options = CudaOptions::default();
    KernelBackend::boxed(
        Device::Cuda,
        Cuda {
            weights: WeightCache::new(),
            options,
        },
    )
}

impl KernelDevice for Cuda {
    type Program = CudaProgram;
    type Error = CudaError;

    fn availability(&self) -> Availability {
        rlx_cuda::probe::availability()
    }

    fn info(&self) -> Option<DeviceInfo> {
        rlx_cuda::probe::info()
    }

    fn settings(&self) -> Vec<rlx_driver::Setting> {
        rlx_driver::settings::settings(rlx_cuda::settings::KNOBS)
    }

    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool {
        rlx_cuda::caps::supports(op, inputs)
    }

    fn low_precision_activations(&self) -> bool {
        true
    }

    fn compile(&self, program: KernelProgram) -> Result<CudaProgram, CudaError> {
        CudaProgram::compile(program, &self.weights, &self.options)
    }

    fn kernel_decisions(
        &self,
        program: &KernelProgram,
        pass: &str,
    ) -> Option<Result<String, CudaError>> {
        let tuning = rlx_cuda::settings::Tuning::from_env();
        let merge = self.options.merge_gemms;
        Some(
            rlx_cuda::plan::kernel_decisions_until(program, &tuning, merge, pass)
                .map(|d| d.dump(program))
                .map_err(|e| CudaError::Invalid(e.to_string())),
        )
    }

    fn unavailable(e: &CudaError) -> Option<String> {
        match e {
            CudaError::Unavailable(reason) => Some(reason.clone()),
            _ => None,
        }
    }

    fn buffers(&self) -> Option<&dyn DeviceBuffers> {
        Some(self)
    }
}

fn cuda_err(e: CudaError) -> RuntimeError {
    let reason = Cuda::unavailable(&e);
    device_err(Device::Cuda, e, reason)
}

/// Pool memory: a buffer of the device's shared pool.
impl BufferStorage for rlx_cuda::memory::DeviceBuffer {
    fn bytes(&self) -> usize {
        rlx_cuda::memory::DeviceBuffer::bytes(self)
    }

    fn handle(&self) -> RawHandle {
        RawHandle::Cuda(self.ptr())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Device memory someone else owns (a PyTorch tensor through DLPack).
struct ForeignCuda {
    ptr: u64,
    bytes: usize,
    _owner: Box<dyn Any + Send + Sync>,
}

impl BufferStorage for ForeignCuda {
    fn bytes(&self) -> usize {
        self.bytes
    }

    fn handle(&self) -> RawHandle {
        RawHandle::Cuda(self.ptr)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The device address of a CUDA buffer, or an error naming `what` for another device's.
fn cuda_ptr(b: &DeviceBuffer, what: &str) -> Result<u64, RuntimeError> {
    match b.handle() {
        RawHandle::Cuda(p) => Ok(p),
        other => Err(RuntimeError::Buffer(format!(
            "{what}: a {} buffer ({other:?}) is not CUDA memory",
            b.device()
        ))),
    }
}

impl DeviceBuffers for Cuda {
    fn alloc(
        &self,
        device: Device,
        dtype: DType,
        shape: &[usize],
    ) -> Result<DeviceBuffer, RuntimeError> {
        let bytes = shape.iter().product::<usize>() * dtype.size_bytes();
        let mem = DeviceMemory::get().map_err(cuda_err)?;
        let b = mem.alloc(bytes).map_err(cuda_err)?;
        DeviceBuffer::new(device, dtype, shape, Arc::new(b))
    }

    unsafe fn wrap(
        &self,
        device: Device,
        handle: RawHandle,
        dtype: DType,
        shape: &[usize],
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<DeviceBuffer, RuntimeError> {
        let RawHandle::Cuda(ptr) = handle else {
            return Err(RuntimeError::Buffer(format!(
                "CUDA reads device pointers only, not {handle:?}"
            )));
        };
        let bytes = shape.iter().product::<usize>() * dtype.size_bytes();
        let storage = ForeignCuda {
            ptr,
            bytes,
            _owner: owner,
        };
        DeviceBuffer::new(device, dtype, shape, Arc::new(storage))
    }

    fn upload(&self, dst: &DeviceBuffer, src: &Tensor) -> Result<(), RuntimeError> {
        let ptr = cuda_ptr(dst, "upload")?;
        let device = CudaDevice::get().map_err(cuda_err)?;
        let staging = StagingPool::get().map_err(cuda_err)?;
        let _queue = device.queue();
        device.bind().map_err(cuda_err)?;
        staging
            .upload(&[(ptr, tensor_bytes(src))])
            .and_then(|_| device.sync())
            .map_err(cuda_err)
    }

    fn download(&self, src: &DeviceBuffer) -> Result<Tensor, RuntimeError> {
        let ptr = cuda_ptr(src, "download")?;
        let device = CudaDevice::get().map_err(cuda_err)?;
        let staging = StagingPool::get().map_err(cuda_err)?;
        let mut bytes = vec![0u8; src.byte_size()];
        {
            let _queue = device.queue();
            device.bind().map_err(cuda_err)?;
            staging
                .download(&mut [(ptr, &mut bytes[..])])
                .and_then(|_| device.sync())
                .map_err(cuda_err)?;
        }
        let data = TensorData::from_le_bytes(src.dtype(), &bytes)
            .ok_or_else(|| RuntimeError::Buffer(format!("unreadable {} bytes", src.dtype())))?;
        Tensor::new(src.shape().to_vec(), data).map_err(|e| RuntimeError::Buffer(e.to_string()))
    }

    fn copy(&self, src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<(), RuntimeError> {
        let from = cuda_ptr(src, "copy")?;
        let to = cuda_ptr(dst, "copy")?;
        if src.byte_size() == 0 {
            return Ok(());
        }
        let device = CudaDevice::get().map_err(cuda_err)?;
        let _queue = device.queue();
        device.bind().map_err(cuda_err)?;
        device
            .copy(to, from, src.byte_size())
            .and_then(|_| device.sync())
            .map_err(cuda_err)
    }

    fn memory(&self) -> Option<rlx_mem::Stats> {
        DeviceMemory::get().ok().map(|m| m.stats())
    }

    fn interop_stream(&self) -> Option<u64> {
        CudaDevice::get().ok().map(|d| d.stream() as usize as u64)
    }
}

impl DeviceProgram for CudaProgram {
    type Error = CudaError;

    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        weights: &HashMap<String, Arc<Tensor>>,
    ) -> Result<Vec<(String, Tensor)>, CudaError> {
        CudaProgram::run(self, inputs, weights)
    }

    fn run_bound(
        &self,
        _device: Device,
        inputs: &HashMap<String, BoundValue>,
        weights: &HashMap<String, Arc<Tensor>>,
        outputs: &[(String, DeviceBuffer)],
    ) -> Result<(), RuntimeError> {
        let mut bound = HashMap::with_capacity(inputs.len());
        for (name, v) in inputs {
            let input = match v {
                BoundValue::Host(t) => BoundInput::Host(t),
                BoundValue::Device(b) => BoundInput::Device {
                    ptr: cuda_ptr(b, &format!("input `{name}`"))?,
                    dtype: b.dtype(),
                    shape: b.shape(),
                },
            };
            bound.insert(name.clone(), input);
        }
        let mut outs = Vec::with_capacity(outputs.len());
        for (name, b) in outputs {
            outs.push((name.clone(), cuda_ptr(b, &format!("output `{name}`"))?));
        }
        CudaProgram::run_bound(self, &bound, weights, &outs).map_err(cuda_err)
    }

    fn kernel_count(&self) -> usize {
        self.stats.launches
    }

    fn arena_bytes(&self) -> usize {
        self.stats.arena_bytes
    }

    fn dump(&self) -> String {
        format!(
            "{}\n// generated CUDA C\n{}",
            CudaProgram::dump(self),
            self.source()
        )
    }

    fn memory(&self) -> Option<rlx_mem::Stats> {
        rlx_cuda::memory::DeviceMemory::get()
            .ok()
            .map(|m| m.stats())
    }

    fn profile(
        &self,
        inputs: &HashMap<String, Tensor>,
        weights: &HashMap<String, Arc<Tensor>>,
        runs: usize,
    ) -> Result<Option<(KernelRuns, &'static str)>, CudaError> {
        CudaProgram::run(self, inputs, weights)?;
        // medians per step already: one run of them
        let run = self
            .profile_steps(runs)?
            .into_iter()
            .map(|(label, ms)| {
                let kind = if label.starts_with("gemm ") {
                    "gemm"
                } else {
                    "kernel"
                };
                (label, kind.to_string(), ms * 1e3)
            })
            .collect();
        Ok(Some((vec![run], "cuda events")))
    }
}
