//! Adapter from the `rlx-cpu` crate to the [`Backend`] contract: lowers the legalized
//! graph to kernel IR with `rlx-opt` and compiles it with the CPU fast path.

use super::host_memory::{self, HostMemory};
use crate::buffer::share_tensor;
use crate::{
    check_same, median_kernels, Backend, BoundValue, CompileOptions, DeviceBuffer, Executable,
    ParamStore, RawHandle, RunProfile, RuntimeError,
};
use rlx_cpu::{CpuOptions, CpuProgram};
use rlx_driver::{Availability, Device, DeviceInfo};
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{DType, Graph, Op, Tensor, TensorData, TensorType};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

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

    fn settings(&self) -> Vec<rlx_driver::Setting> {
        rlx_driver::settings::settings(rlx_cpu::settings::KNOBS)
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
        rlx_cpu::supports(op)
    }

    /// Matmuls by a weight only: they run on AMX tiles (bf16) where the CPU has them;
    /// attention, conv2d and products of two activations compute in f32 whatever their
    /// operands, so casting those would only round.
    fn low_precision_product(&self, op: &Op, weight: bool) -> bool {
        matches!(op, Op::MatMul) && weight
    }

    fn kernel_decisions(
        &self,
        program: &KernelProgram,
        pass: &str,
    ) -> Result<String, RuntimeError> {
        rlx_cpu::kernel_decisions(program, pass).map_err(backend_err)
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

    fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<DeviceBuffer, RuntimeError> {
        let bytes = shape.iter().product::<usize>() * dtype.size_bytes();
        let memory = HostMemory::alloc(bytes)?;
        DeviceBuffer::new(Device::Cpu, dtype, shape, Arc::new(memory))
    }

    unsafe fn wrap(
        &self,
        handle: RawHandle,
        dtype: DType,
        shape: &[usize],
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<DeviceBuffer, RuntimeError> {
        let RawHandle::Host(ptr) = handle else {
            return Err(RuntimeError::Buffer(format!(
                "the CPU reads host memory only, not {handle:?}"
            )));
        };
        let bytes = shape.iter().product::<usize>() * dtype.size_bytes();
        // SAFETY: the caller's contract: `bytes` valid bytes at `ptr` while `owner` lives.
        let memory = unsafe { HostMemory::foreign(ptr as *mut u8, bytes, owner) };
        DeviceBuffer::new(Device::Cpu, dtype, shape, Arc::new(memory))
    }

    fn upload(&self, dst: &DeviceBuffer, src: &Tensor) -> Result<(), RuntimeError> {
        check_same("upload", dst, src)?;
        write_tensor(dst, src)
    }

    fn download(&self, src: &DeviceBuffer) -> Result<Tensor, RuntimeError> {
        let m = src.storage_as::<HostMemory>("download")?;
        let _read = m.lock.read().unwrap_or_else(|e| e.into_inner());
        tensor_of(src, m.bytes(src.offset(), src.byte_size()))
    }

    fn copy(&self, src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<(), RuntimeError> {
        check_sizes(src, dst)?;
        let from = src.storage_as::<HostMemory>("copy")?;
        let to = dst.storage_as::<HostMemory>("copy")?;
        if src.same_storage(dst) {
            let _write = to.lock.write().unwrap_or_else(|e| e.into_inner());
            let all = to.bytes_mut(0, to_bytes(dst));
            all.copy_within(src.offset()..src.offset() + src.byte_size(), dst.offset());
            return Ok(());
        }
        let _read = from.lock.read().unwrap_or_else(|e| e.into_inner());
        let _write = to.lock.write().unwrap_or_else(|e| e.into_inner());
        to.bytes_mut(dst.offset(), dst.byte_size())
            .copy_from_slice(from.bytes(src.offset(), src.byte_size()));
        Ok(())
    }

    fn map_read(&self, buf: &DeviceBuffer, f: &mut dyn FnMut(&[u8])) -> Result<(), RuntimeError> {
        let m = buf.storage_as::<HostMemory>("map")?;
        let _read = m.lock.read().unwrap_or_else(|e| e.into_inner());
        f(m.bytes(buf.offset(), buf.byte_size()));
        Ok(())
    }

    fn map_write(
        &self,
        buf: &DeviceBuffer,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), RuntimeError> {
        let m = buf.storage_as::<HostMemory>("map")?;
        let _write = m.lock.write().unwrap_or_else(|e| e.into_inner());
        f(m.bytes_mut(buf.offset(), buf.byte_size()));
        Ok(())
    }

    fn memory(&self) -> Option<rlx_mem::Stats> {
        Some(host_memory::stats())
    }
}

/// Bytes of the whole storage a buffer lies in.
fn to_bytes(b: &DeviceBuffer) -> usize {
    b.storage_bytes()
}

fn check_sizes(src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<(), RuntimeError> {
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

/// A host tensor of the buffer's type holding a copy of `bytes`.
fn tensor_of(buf: &DeviceBuffer, bytes: &[u8]) -> Result<Tensor, RuntimeError> {
    let data = TensorData::from_le_bytes(buf.dtype(), bytes)
        .ok_or_else(|| RuntimeError::Buffer(format!("unreadable {} bytes", buf.dtype())))?;
    Tensor::new(buf.shape().to_vec(), data).map_err(|e| RuntimeError::Buffer(e.to_string()))
}

/// Writes a tensor's bytes into a CPU buffer of the same size.
fn write_tensor(dst: &DeviceBuffer, t: &Tensor) -> Result<(), RuntimeError> {
    let m = dst.storage_as::<HostMemory>("write")?;
    let bytes = t.data().as_bytes();
    if bytes.len() != dst.byte_size() {
        return Err(RuntimeError::Buffer(format!(
            "{} bytes into a buffer of {}",
            bytes.len(),
            dst.byte_size()
        )));
    }
    let _write = m.lock.write().unwrap_or_else(|e| e.into_inner());
    m.bytes_mut(dst.offset(), dst.byte_size())
        .copy_from_slice(bytes);
    Ok(())
}

/// `t` with its elements in memory of its own (a copy when it reads someone else's).
fn owned(t: Tensor) -> Tensor {
    if !t.is_shared() {
        return t;
    }
    match TensorData::from_le_bytes(t.dtype(), t.data().as_bytes()) {
        Some(d) => Tensor::new(t.shape().to_vec(), d).unwrap_or(t),
        None => t,
    }
}

/// A CPU buffer's bytes, read in place while the run holds the storage's read lock.
struct BufferBytes {
    _keep: DeviceBuffer,
    ptr: *const u8,
    len: usize,
}

// SAFETY: read-only bytes kept alive by the buffer handle.
unsafe impl Send for BufferBytes {}
// SAFETY: as above.
unsafe impl Sync for BufferBytes {}

impl AsRef<[u8]> for BufferBytes {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `len` bytes at `ptr`, alive while `_keep` is; nobody writes them while the
        // run that made this holds the read lock.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A tensor reading a CPU buffer in place (a copy where the layout forbids: bool).
fn borrow_buffer(b: &DeviceBuffer, m: &HostMemory) -> Result<Tensor, RuntimeError> {
    let bytes = m.bytes(b.offset(), b.byte_size());
    let owner = Arc::new(BufferBytes {
        _keep: b.clone(),
        ptr: bytes.as_ptr(),
        len: bytes.len(),
    });
    match TensorData::shared_from_le_bytes(b.dtype(), owner, bytes) {
        Some(d) => {
            Tensor::new(b.shape().to_vec(), d).map_err(|e| RuntimeError::Buffer(e.to_string()))
        }
        None => tensor_of(b, bytes),
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

    /// Inputs in CPU buffers are read in place; outputs are copied into their buffers
    /// (the program allocates its own outputs).
    fn run_bound(
        &self,
        inputs: &HashMap<String, BoundValue>,
        outputs: &[(String, DeviceBuffer)],
        params: &ParamStore,
    ) -> Result<(), RuntimeError> {
        let params = params.snapshot();
        let results = {
            let mut storages: Vec<&HostMemory> = Vec::new();
            for (name, v) in inputs {
                if let BoundValue::Device(b) = v {
                    let m = b.storage_as::<HostMemory>(&format!("input `{name}`"))?;
                    if !storages.iter().any(|s| std::ptr::eq(*s, m)) {
                        storages.push(m);
                    }
                }
            }
            // one read lock per storage (two on one lock could wait on a queued writer)
            let _reads: Vec<_> = storages
                .iter()
                .map(|m| m.lock.read().unwrap_or_else(|e| e.into_inner()))
                .collect();
            let mut tensors = HashMap::with_capacity(inputs.len());
            for (name, v) in inputs {
                let t = match v {
                    BoundValue::Host(t) => share_tensor(t),
                    BoundValue::Device(b) => borrow_buffer(b, b.storage_as::<HostMemory>(name)?)?,
                };
                tensors.insert(name.clone(), t);
            }
            let out = self.program.run(&tensors, &params).map_err(backend_err)?;
            drop(tensors);
            // an output that reads an input in place (a graph returning its input) must not
            // outlive the read locks
            out.into_iter()
                .map(|(n, t)| (n, owned(t)))
                .collect::<Vec<_>>()
        };
        for (name, buf) in outputs {
            let t = results
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t)
                .ok_or_else(|| RuntimeError::Output {
                    name: name.clone(),
                    message: "the program did not produce it".into(),
                })?;
            write_tensor(buf, t)?;
        }
        Ok(())
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
