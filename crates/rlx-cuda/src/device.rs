//! A thin, owned wrapper over the CUDA driver for device 0: the primary context, one
//! stream (with a lock for sequences of work on it), module loading, launches, copies,
//! pinned host memory and CUDA graphs. Everything goes through cudarc's `result` layer (no
//! hidden event tracking), and only after the probe has confirmed the driver loads.

use crate::codegen::Launch;
use crate::probe::{device_facts, CudaDeviceFacts};
use crate::CudaError;
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The device, its primary context and the backend's stream.
pub struct CudaDevice {
    device: sys::CUdevice,
    context: sys::CUcontext,
    stream: sys::CUstream,
    /// held for a sequence of work on the stream that must not interleave with another
    /// thread's (see [`CudaDevice::queue`])
    queue: Mutex<()>,
    /// launches of generated kernels carry programmatic stream serialization (see
    /// [`CudaDevice::launch`])
    pdl: bool,
    /// facts from the probe
    pub facts: &'static CudaDeviceFacts,
}

// SAFETY: the driver API is thread safe; the context is made current on each thread that
// uses it (`bind`), and the stream is only used under the callers' own locks.
unsafe impl Send for CudaDevice {}
// SAFETY: as above.
unsafe impl Sync for CudaDevice {}

impl CudaDevice {
    /// The process-wide device 0, opened once.
    ///
    /// # Errors
    /// CUDA is unavailable (with the probe's reason) or the context cannot be created.
    pub fn get() -> Result<Arc<CudaDevice>, CudaError> {
        static DEVICE: OnceLock<Result<Arc<CudaDevice>, String>> = OnceLock::new();
        DEVICE
            .get_or_init(|| CudaDevice::open().map(Arc::new).map_err(|e| e.to_string()))
            .clone()
            .map_err(CudaError::Unavailable)
    }

    fn open() -> Result<CudaDevice, CudaError> {
        let facts = device_facts().map_err(CudaError::Unavailable)?;
        let device = result::device::get(0).map_err(|e| CudaError::driver("cuDeviceGet", e))?;
        // SAFETY: `device` is valid; the primary context is retained for the process.
        let context = unsafe { result::primary_ctx::retain(device) }
            .map_err(|e| CudaError::driver("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: the context was just retained.
        unsafe { result::ctx::set_current(context) }
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| CudaError::driver("cuStreamCreate", e))?;
        Ok(CudaDevice {
            device,
            context,
            stream,
            queue: Mutex::new(()),
            pdl: facts.compute_capability.0 >= 9 && crate::settings::PDL.switch(),
            facts,
        })
    }

    /// Exclusive use of the stream for one sequence of work (a run with its uploads, graph
    /// capture and downloads; a compile's uploads and tuning). Programs run from several
    /// threads share the stream, and a capture must not take in another thread's launches
    /// or see its synchronizations: without this the GPU tests crashed when run in
    /// parallel. Not re-entrant: taken once, at a program's public entry points.
    pub fn queue(&self) -> MutexGuard<'_, ()> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the context current on the calling thread.
    ///
    /// # Errors
    /// The driver refuses.
    pub fn bind(&self) -> Result<(), CudaError> {
        // SAFETY: the context lives as long as the process.
        unsafe { result::ctx::set_current(self.context) }
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))
    }

    /// The backend's stream.
    pub fn stream(&self) -> sys::CUstream {
        self.stream
    }

    /// The raw device handle.
    pub fn raw(&self) -> sys::CUdevice {
        self.device
    }

    /// Waits for all work on the stream.
    ///
    /// # Errors
    /// A kernel failed (the driver reports the first error here).
    pub fn sync(&self) -> Result<(), CudaError> {
        // SAFETY: the stream is valid.
        unsafe { result::stream::synchronize(self.stream) }
            .map_err(|e| CudaError::driver("cuStreamSynchronize", e))
    }

    /// Bytes free and total on the device.
    pub fn mem_info(&self) -> (usize, usize) {
        result::mem_get_info().unwrap_or((0, 0))
    }

    /// Loads a CUBIN image.
    ///
    /// # Errors
    /// The driver rejects the image.
    pub fn load_module(&self, image: &[u8]) -> Result<Module, CudaError> {
        self.bind()?;
        // SAFETY: `image` is a CUBIN produced by NVRTC for this device's architecture.
        let module = unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
            .map_err(|e| CudaError::driver("cuModuleLoadData", e))?;
        Ok(Module { module })
    }

    /// Launches `f` on the stream with pointer arguments `args`. On sm_90 and newer the
    /// launch allows programmatic dependent launch (`RLX_CUDA_PDL=0` turns it off): the
    /// kernel's blocks may be scheduled while the previous kernel's last blocks still run,
    /// and every generated kernel first waits (`griddepcontrol.wait`, the prelude's
    /// `RLX_GRID_WAIT`) until that kernel has finished and its writes are visible, so only
    /// the launch latency overlaps.
    ///
    /// # Errors
    /// The driver rejects the launch (named after `what`).
    pub fn launch(
        &self,
        f: &Function,
        launch: &Launch,
        args: &[u64],
        what: &str,
    ) -> Result<(), CudaError> {
        let mut values: Vec<u64> = args.to_vec();
        let mut ptrs: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        if self.pdl {
            let mut attr = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                // SAFETY: an all-zero union is a valid value; one field is set below.
                value: unsafe { std::mem::zeroed() },
            };
            attr.value.programmaticStreamSerializationAllowed = 1;
            let config = sys::CUlaunchConfig {
                gridDimX: launch.grid[0],
                gridDimY: launch.grid[1],
                gridDimZ: 1,
                blockDimX: launch.block,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: launch.shared_bytes,
                hStream: self.stream,
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as below; `config` and `attr` outlive the call.
            let r = unsafe {
                sys::cuLaunchKernelEx(&config, f.0, ptrs.as_mut_ptr(), std::ptr::null_mut())
            };
            return r
                .result()
                .map_err(|e| CudaError::driver(format!("cuLaunchKernelEx {what}"), e));
        }
        // SAFETY: `f` comes from a loaded module; every argument is a device pointer the
        // kernel's signature expects, in order.
        unsafe {
            result::launch_kernel(
                f.0,
                (launch.grid[0], launch.grid[1], 1),
                (launch.block, 1, 1),
                launch.shared_bytes,
                self.stream,
                &mut ptrs,
            )
        }
        .map_err(|e| CudaError::driver(format!("cuLaunchKernel {what}"), e))
    }

    /// Copies host bytes to the device, asynchronously on the stream (the host memory must
    /// stay valid until the stream is synchronized; pinned for true asynchrony).
    ///
    /// # Errors
    /// The copy is refused.
    pub fn upload(&self, dst: u64, src: &[u8]) -> Result<(), CudaError> {
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` holds at least `src.len()` bytes (sized by the caller's plan).
        unsafe { result::memcpy_htod_async(dst, src, self.stream) }
            .map_err(|e| CudaError::driver("cuMemcpyHtoDAsync", e))
    }

    /// Copies device bytes to the host, asynchronously on the stream.
    ///
    /// # Errors
    /// The copy is refused.
    pub fn download(&self, dst: &mut [u8], src: u64) -> Result<(), CudaError> {
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: `src` holds at least `dst.len()` bytes.
        unsafe { result::memcpy_dtoh_async(dst, src, self.stream) }
            .map_err(|e| CudaError::driver("cuMemcpyDtoHAsync", e))
    }

    /// Copies between device buffers on the stream.
    ///
    /// # Errors
    /// The copy is refused.
    pub fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<(), CudaError> {
        // SAFETY: both ranges hold `bytes` bytes.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream) }
            .map_err(|e| CudaError::driver("cuMemcpyDtoDAsync", e))
    }

    /// Starts capturing the stream into a graph.
    ///
    /// # Errors
    /// The driver refuses.
    pub fn begin_capture(&self) -> Result<(), CudaError> {
        // SAFETY: the stream is valid and not capturing.
        unsafe {
            result::stream::begin_capture(
                self.stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
        .map_err(|e| CudaError::driver("cuStreamBeginCapture", e))
    }

    /// Ends the capture and instantiates the graph.
    ///
    /// # Errors
    /// Something in the captured work was not capturable.
    pub fn end_capture(&self) -> Result<Graph, CudaError> {
        // SAFETY: the stream is capturing.
        let graph = unsafe { result::stream::end_capture(self.stream) }
            .map_err(|e| CudaError::driver("cuStreamEndCapture", e))?;
        // SAFETY: `graph` was just captured.
        let exec = unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) };
        // SAFETY: the executable graph keeps what it needs.
        unsafe { result::graph::destroy(graph) }
            .map_err(|e| CudaError::driver("cuGraphDestroy", e))?;
        let exec = exec.map_err(|e| CudaError::driver("cuGraphInstantiate", e))?;
        Ok(Graph { exec })
    }

    /// Replays a captured graph on the stream.
    ///
    /// # Errors
    /// The driver refuses.
    pub fn replay(&self, graph: &Graph) -> Result<(), CudaError> {
        // SAFETY: the graph was instantiated in this context.
        unsafe { result::graph::launch(graph.exec, self.stream) }
            .map_err(|e| CudaError::driver("cuGraphLaunch", e))
    }
}

impl CudaDevice {
    /// Records a timing event on the stream.
    ///
    /// # Errors
    /// The driver refuses.
    pub fn record(&self) -> Result<Event, CudaError> {
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| CudaError::driver("cuEventCreate", e))?;
        // SAFETY: both handles are valid.
        unsafe { result::event::record(event, self.stream) }
            .map_err(|e| CudaError::driver("cuEventRecord", e))?;
        Ok(Event { event })
    }

    /// Milliseconds between two recorded events (waits for the second).
    ///
    /// # Errors
    /// The driver refuses.
    pub fn elapsed_ms(&self, start: &Event, end: &Event) -> Result<f32, CudaError> {
        // SAFETY: both events were recorded on this device's stream.
        unsafe {
            result::event::synchronize(end.event)
                .map_err(|e| CudaError::driver("cuEventSynchronize", e))?;
            result::event::elapsed(start.event, end.event)
                .map_err(|e| CudaError::driver("cuEventElapsedTime", e))
        }
    }
}

impl CudaDevice {
    /// Milliseconds per call of `enqueue` (which enqueues work on this device's stream):
    /// `warmup` eager calls, then `reps` calls captured as one CUDA graph, replayed once
    /// untimed and once between two events (eagerly between the events when capture fails),
    /// so launch gaps do not count.
    ///
    /// # Errors
    /// `enqueue` or the driver fails.
    pub fn time_enqueued(
        &self,
        warmup: usize,
        reps: usize,
        mut enqueue: impl FnMut() -> Result<(), CudaError>,
    ) -> Result<f64, CudaError> {
        let reps = reps.max(1);
        for _ in 0..warmup {
            enqueue()?;
        }
        self.sync()?;
        self.begin_capture()?;
        let enqueued = (0..reps).try_for_each(|_| enqueue());
        let captured = self.end_capture();
        enqueued?;
        let (start, end) = match captured {
            Ok(graph) => {
                self.replay(&graph)?;
                let start = self.record()?;
                self.replay(&graph)?;
                (start, self.record()?)
            }
            Err(_) => {
                let start = self.record()?;
                for _ in 0..reps {
                    enqueue()?;
                }
                (start, self.record()?)
            }
        };
        Ok(self.elapsed_ms(&start, &end)? as f64 / reps as f64)
    }
}

/// A timing event; destroyed on drop.
pub struct Event {
    event: sys::CUevent,
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { result::event::destroy(self.event) };
    }
}

/// A loaded module; unloaded on drop.
pub struct Module {
    module: sys::CUmodule,
}

// SAFETY: module handles may be used from any thread with the context current.
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Sync for Module {}

impl Module {
    /// A function of the module; raises its dynamic shared memory limit when it needs more
    /// than the default 48 KiB.
    ///
    /// # Errors
    /// No such function, or the limit cannot be raised.
    pub fn function(&self, name: &str, shared_bytes: u32) -> Result<Function, CudaError> {
        let cname = CString::new(name)
            .map_err(|_| CudaError::Invalid(format!("function name {name:?}")))?;
        // SAFETY: the module is loaded; the name is NUL terminated.
        let f = unsafe { result::module::get_function(self.module, cname) }
            .map_err(|e| CudaError::driver(format!("cuModuleGetFunction {name}"), e))?;
        if shared_bytes > 48 * 1024 {
            // SAFETY: `f` is valid; the size is within the device's opt-in limit (checked by codegen).
            unsafe {
                result::function::set_function_attribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes as i32,
                )
            }
            .map_err(|e| {
                CudaError::driver(
                    format!("cuFuncSetAttribute {name} ({shared_bytes} bytes shared)"),
                    e,
                )
            })?;
        }
        Ok(Function(f))
    }
}

/// A kernel function of a loaded module (valid while its module is).
#[derive(Clone, Copy)]
pub struct Function(sys::CUfunction);

// SAFETY: function handles are immutable and usable from any thread with the context current.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Sync for Function {}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded once, unloaded once.
        let _ = unsafe { result::module::unload(self.module) };
    }
}

/// An instantiated CUDA graph; destroyed on drop.
pub struct Graph {
    exec: sys::CUgraphExec,
}

// SAFETY: graph execs may be launched from any thread with the context current.
unsafe impl Send for Graph {}
// SAFETY: as above.
unsafe impl Sync for Graph {}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: instantiated once, destroyed once.
        let _ = unsafe { result::graph::exec_destroy(self.exec) };
    }
}
