//! A compiled wgpu program: generated shaders with their pipelines and bind groups (built
//! at compile time and cached by shader text), one planned arena for every intermediate,
//! and device ranges for inputs, constants and weights, all sub-allocated from the
//! context's pool. A run stages its inputs through the context's staging pool, records
//! every dispatch into one command encoder, copies the outputs into download chunks in the
//! same submission, and reads them out once it completes.

use crate::codegen::{ArgRef, Target};
use crate::memory::{memory, DeviceBuffer, DeviceMemory};
use crate::plan::{plan, Plan};
use crate::probe::{context, Context, Flavor};
use crate::weights::{WeightCache, WeightSlot};
use crate::{WgpuError, WgpuOptions};
use rlx_ir::kernel::{BufferKind, KernelProgram};
use rlx_ir::kernel_views::root;
use rlx_ir::DType;
use rlx_opt::buffers::{buffer_bytes, Home as BufferHome};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

mod run;

use run::check_i64;
pub use run::BoundInput;

/// Facts about one compile.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompileStats {
    /// dispatches per run
    pub dispatches: usize,
    /// distinct pipelines of this program
    pub pipelines: usize,
    /// pipelines that came from the process cache
    pub cached_pipelines: usize,
    /// shader and pipeline creation time in milliseconds
    pub pipeline_ms: f64,
    /// bytes of the planned arena
    pub arena_bytes: usize,
}

/// Where a program buffer lives on the device.
enum Home {
    Arena(u64),
    Input(usize),
    Weight(Arc<WeightSlot>),
    Constant(usize),
}

/// What one run at a time uses.
struct RunState {
    /// copies between ranges of one buffer go through it (`transfer::encode_copy`)
    bounce: Option<wgpu::Buffer>,
}

/// A kernel program compiled for one wgpu device.
pub struct WgpuProgram {
    ctx: Arc<Context>,
    mem: Arc<DeviceMemory>,
    program: KernelProgram,
    plan: Plan,
    pipelines: Vec<wgpu::ComputePipeline>,
    bind_groups: Vec<wgpu::BindGroup>,
    _arena: DeviceBuffer,
    inputs: Vec<(String, usize, DeviceBuffer)>,
    _constants: Vec<DeviceBuffer>,
    params: Vec<(String, usize, Arc<WeightSlot>)>,
    outputs: Vec<(String, usize, usize)>,
    output_locs: Vec<(wgpu::Buffer, u64)>,
    /// bytes of the staging pool runs copy through (0: no pool)
    staging_bytes: usize,
    running: Mutex<RunState>,
    /// compile facts
    pub stats: CompileStats,
}

fn dev_err(call: &str, e: impl std::fmt::Display) -> WgpuError {
    WgpuError::Device {
        call: call.into(),
        message: e.to_string(),
    }
}

/// The code-generation target of a context: its limits and every optional feature its
/// device was created with.
pub fn target(ctx: &Context) -> Target {
    Target {
        max_workgroups: ctx.limits.max_compute_workgroups_per_dimension,
        max_workgroup_storage: ctx.limits.max_compute_workgroup_storage_size,
        max_invocations: ctx.limits.max_compute_invocations_per_workgroup,
        simple_gemm: ctx.flavor == Flavor::OpenGl,
        shader_f16: ctx.facts.shader_f16,
        subgroups: ctx.facts.subgroups,
        vec4: true,
    }
}

/// [`target`] with the features `options` turn off removed.
pub fn target_with(ctx: &Context, options: &WgpuOptions) -> Target {
    let t = target(ctx);
    Target {
        shader_f16: t.shader_f16 && options.shader_f16,
        subgroups: t.subgroups && options.subgroups,
        vec4: t.vec4 && options.vec4,
        ..t
    }
}

type PipelineCache = Mutex<HashMap<(Flavor, bool, String), wgpu::ComputePipeline>>;

fn pipeline_cache() -> &'static PipelineCache {
    static CACHE: std::sync::OnceLock<PipelineCache> = std::sync::OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Creates (or takes from the process cache) the pipeline of a shader with `n` storage
/// bindings; wgpu's validation errors become [`WgpuError::Shader`].
fn pipeline(
    ctx: &Context,
    label: &str,
    wgsl: &str,
    n: usize,
    checked: bool,
) -> Result<(wgpu::ComputePipeline, bool), WgpuError> {
    let key = (ctx.flavor, checked, wgsl.to_string());
    if let Some(p) = pipeline_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
    {
        return Ok((p.clone(), true));
    }
    let device = &ctx.device;
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(std::borrow::Cow::Borrowed(wgsl)),
    };
    let module = if checked {
        device.create_shader_module(desc)
    } else {
        // SAFETY: every access the generators emit is guarded or clamped to its binding
        // (see `WgpuOptions`); the differential tests check the indexing.
        unsafe { device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
    };
    let entries: Vec<wgpu::BindGroupLayoutEntry> = (0..n as u32)
        .map(|i| wgpu::BindGroupLayoutEntry {
            binding: i,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(label),
        entries: &entries,
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(label),
        bind_group_layouts: &[Some(&bgl)],
        immediate_size: 0,
    });
    let p = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(label),
        layout: Some(&layout),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    if let Some(e) = pollster::block_on(scope.pop()) {
        // wgpu's Display says only "Validation Error"; the cause is in its description
        let message = match &e {
            wgpu::Error::Validation { description, .. } => description.trim().to_string(),
            other => other.to_string(),
        };
        return Err(WgpuError::Shader {
            kernel: label.to_string(),
            message,
            source_text: wgsl.to_string(),
        });
    }
    pipeline_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, p.clone());
    Ok((p, false))
}

/// Per profiled run, every dispatch's label and microseconds.
pub type DispatchTimes = Vec<Vec<(String, f64)>>;

impl WgpuProgram {
    /// Plans, generates and builds `program` for `flavor`: pipelines, memory, bind groups;
    /// uploads its constants. Weights get slots in `weights` (uploaded at run time).
    ///
    /// # Errors
    /// The device is unavailable, kernels are unsupported (all listed), a shader was
    /// rejected (with its WGSL), a binding exceeds the adapter's limits, or out of memory.
    pub fn compile(
        flavor: Flavor,
        program: KernelProgram,
        weights: &WeightCache,
        options: &WgpuOptions,
    ) -> Result<WgpuProgram, WgpuError> {
        let ctx = context(flavor).map_err(WgpuError::Unavailable)?;
        let mem = memory(&ctx);
        let target = target_with(&ctx, options);
        let plan = plan(&program, &target)?;
        let label = ctx.label();
        let limits = &ctx.limits;
        // Limits: bindings per shader and binding sizes, all reported together.
        let mut problems = Vec::new();
        for step in &plan.steps {
            if step.bindings.len() as u32 > limits.max_storage_buffers_per_shader_stage {
                problems.push(WgpuError::Limit {
                    device: label.clone(),
                    what: format!(
                        "kernel `{}` with {} storage bindings",
                        step.label,
                        step.bindings.len()
                    ),
                    limit: format!(
                        "max_storage_buffers_per_shader_stage = {}",
                        limits.max_storage_buffers_per_shader_stage
                    ),
                    hint: "fewer fused inputs are needed; run on `vulkan` or `gpu` for the adapter's own limits".into(),
                });
            }
        }
        let buf_size = |r: ArgRef| -> usize {
            match r {
                ArgRef::Buffer(b) => buffer_bytes(&program, root(&program, b)),
                ArgRef::Scratch(i) => plan.scratch[i],
            }
        };
        for step in &plan.steps {
            for b in &step.bindings {
                let size = buf_size(b.arg).max(4).next_multiple_of(4) as u64;
                if size > limits.max_storage_buffer_binding_size {
                    problems.push(WgpuError::Limit {
                        device: label.clone(),
                        what: format!("a {size}-byte tensor bound by kernel `{}`", step.label),
                        limit: format!(
                            "max_storage_buffer_binding_size = {}",
                            limits.max_storage_buffer_binding_size
                        ),
                        hint: "use a smaller batch or an adapter with larger bindings".into(),
                    });
                }
            }
        }
        if let Some(first) = problems.into_iter().next() {
            return Err(first);
        }
        // Pipelines.
        let start = Instant::now();
        let mut pipelines = Vec::with_capacity(plan.steps.len());
        let mut stats = CompileStats {
            dispatches: plan.steps.len(),
            ..CompileStats::default()
        };
        let mut distinct = std::collections::HashSet::new();
        for step in &plan.steps {
            let (p, cached) = pipeline(
                &ctx,
                &step.label,
                &step.wgsl,
                step.bindings.len(),
                options.checked_on(flavor),
            )?;
            if distinct.insert(step.wgsl.as_str()) {
                stats.pipelines += 1;
                stats.cached_pipelines += cached as usize;
            }
            pipelines.push(p);
        }
        stats.pipeline_ms = start.elapsed().as_secs_f64() * 1e3;
        // Memory: one arena for temporaries and scratch, planned by lifetime.
        let buffers = crate::arena::buffer_plan(&program, &plan, ctx.align())?;
        stats.arena_bytes = buffers.arena_bytes;
        if buffers.arena_bytes as u64 > limits.max_buffer_size {
            return Err(WgpuError::Limit {
                device: label.clone(),
                what: format!("the planned arena of {} bytes", buffers.arena_bytes),
                limit: format!("max_buffer_size = {}", limits.max_buffer_size),
                hint: "use a smaller batch".into(),
            });
        }
        let arena = mem.alloc(buffers.arena_bytes)?;
        let scratch_offsets: Vec<u64> = buffers.scratch.iter().map(|&o| o as u64).collect();
        let mut homes: Vec<Option<Home>> = (0..program.buffers.len())
            .map(|b| match buffers.homes[b] {
                BufferHome::Arena(offset) if buffers.roots[b] == b => {
                    Some(Home::Arena(offset as u64))
                }
                _ => None,
            })
            .collect();
        let (mut inputs, mut constants, mut params) = (Vec::new(), Vec::new(), Vec::new());
        for (b, buf) in program.buffers.iter().enumerate() {
            if buf.alias_of.is_some() {
                continue;
            }
            let bytes = buffer_bytes(&program, b);
            match &buf.kind {
                BufferKind::Input(name) => {
                    homes[b] = Some(Home::Input(inputs.len()));
                    inputs.push((name.clone(), b, mem.alloc(bytes)?));
                }
                BufferKind::Param(name) => {
                    let slot = weights.slot(name, bytes, |n| mem.alloc(n))?;
                    homes[b] = Some(Home::Weight(slot.clone()));
                    params.push((name.clone(), b, slot));
                }
                BufferKind::Constant(t) => {
                    let d = mem.alloc(bytes)?;
                    check_i64(t, "constant", "")?;
                    crate::transfer::write(
                        &ctx,
                        options,
                        d.buffer(),
                        d.offset(),
                        t.data().as_bytes(),
                    )?;
                    homes[b] = Some(Home::Constant(constants.len()));
                    constants.push(d);
                }
                BufferKind::Temp => {
                    if homes[b].is_none() {
                        homes[b] = Some(Home::Arena(0));
                    }
                }
            }
        }
        // Bind groups, built once.
        let locate = |r: ArgRef| -> Result<(wgpu::Buffer, u64), WgpuError> {
            Ok(match r {
                ArgRef::Scratch(i) => (arena.buffer().clone(), arena.offset() + scratch_offsets[i]),
                ArgRef::Buffer(b) => match &homes[root(&program, b)] {
                    Some(Home::Arena(off)) => (arena.buffer().clone(), arena.offset() + off),
                    Some(Home::Input(i)) => (inputs[*i].2.buffer().clone(), inputs[*i].2.offset()),
                    Some(Home::Weight(s)) => (s.buffer().buffer().clone(), s.buffer().offset()),
                    Some(Home::Constant(i)) => {
                        let c: &DeviceBuffer = &constants[*i];
                        (c.buffer().clone(), c.offset())
                    }
                    None => {
                        return Err(WgpuError::Invalid(format!("buffer b{b} has no home")));
                    }
                },
            })
        };
        let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut bind_groups = Vec::with_capacity(plan.steps.len());
        for (step, p) in plan.steps.iter().zip(&pipelines) {
            let located: Vec<(wgpu::Buffer, u64, u64)> = step
                .bindings
                .iter()
                .map(|b| {
                    locate(b.arg).map(|(buf, off)| {
                        (buf, off, buf_size(b.arg).max(4).next_multiple_of(4) as u64)
                    })
                })
                .collect::<Result<_, _>>()?;
            let entries: Vec<wgpu::BindGroupEntry> = located
                .iter()
                .enumerate()
                .map(|(i, (buf, off, size))| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: buf,
                        offset: *off,
                        size: wgpu::BufferSize::new(*size),
                    }),
                })
                .collect();
            bind_groups.push(ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(&step.label),
                layout: &p.get_bind_group_layout(0),
                entries: &entries,
            }));
        }
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(dev_err("create_bind_group", e));
        }
        let outputs: Vec<(String, usize, usize)> = program
            .outputs
            .iter()
            .map(|(n, b)| (n.clone(), *b, buffer_bytes(&program, *b)))
            .collect();
        let output_locs = outputs
            .iter()
            .map(|(_, b, _)| locate(ArgRef::Buffer(*b)))
            .collect::<Result<Vec<_>, _>>()?;
        let prog = WgpuProgram {
            ctx,
            mem,
            program,
            plan,
            pipelines,
            bind_groups,
            _arena: arena,
            inputs,
            _constants: constants,
            params,
            outputs,
            output_locs,
            staging_bytes: options.staging_bytes,
            running: Mutex::new(RunState { bounce: None }),
            stats,
        };
        Ok(prog)
    }

    /// The generated WGSL of every dispatch, in order.
    pub fn source(&self) -> String {
        let mut seen = std::collections::HashSet::new();
        let mut s = String::new();
        for step in &self.plan.steps {
            if seen.insert(step.wgsl.as_str()) {
                s += &format!(
                    "// ---- {} {:?}\n{}\n",
                    step.label, step.workgroups, step.wgsl
                );
            } else {
                s += &format!(
                    "// ---- {} {:?} (same shader as above)\n",
                    step.label, step.workgroups
                );
            }
        }
        s
    }

    /// The statistics of the device memory pool this program allocates from.
    pub fn memory_stats(&self) -> rlx_mem::Stats {
        self.mem.stats()
    }

    /// The statistics of the staging pool its runs copy through.
    pub fn staging_stats(&self) -> rlx_mem::Stats {
        self.mem.staging_stats()
    }

    /// The plan (shaders and scratch).
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The kernel program text.
    pub fn dump(&self) -> String {
        self.program.to_string()
    }

    /// The context this program runs on.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("rlx run"),
            timestamp_writes: None,
        });
        for ((step, p), bg) in self
            .plan
            .steps
            .iter()
            .zip(&self.pipelines)
            .zip(&self.bind_groups)
        {
            pass.set_pipeline(p);
            pass.set_bind_group(0, bg, &[]);
            let [x, y, z] = step.workgroups;
            pass.dispatch_workgroups(x, y, z);
        }
    }

    fn wait(&self) -> Result<(), WgpuError> {
        self.ctx
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| dev_err("poll", e))?;
        let errors = self.ctx.take_errors();
        if !errors.is_empty() {
            return Err(dev_err("run", errors.join("; ")));
        }
        Ok(())
    }

    /// Times every dispatch `iters` times (inputs and weights stay where the last
    /// [`WgpuProgram::run`] put them): on the GPU's timestamps where the device has timestamp
    /// queries (each dispatch in its own pass), else on the host clock around a submission
    /// of each dispatch alone. Per run, every dispatch's label and microseconds, and the
    /// clock's name.
    ///
    /// # Errors
    /// A device failure.
    pub fn profile_dispatches(
        &self,
        iters: usize,
    ) -> Result<(DispatchTimes, &'static str), WgpuError> {
        let steps = || {
            self.plan
                .steps
                .iter()
                .zip(&self.pipelines)
                .zip(&self.bind_groups)
        };
        let n = self.plan.steps.len();
        let mut runs = Vec::with_capacity(iters);
        let device = &self.ctx.device;
        if n > 0 && device.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            let count = (2 * n) as u32;
            let set = device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("rlx profile"),
                ty: wgpu::QueryType::Timestamp,
                count,
            });
            let bytes = u64::from(count) * 8;
            let resolve = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("rlx profile resolve"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let read = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("rlx profile read"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let period = f64::from(self.ctx.queue.get_timestamp_period());
            for _ in 0..iters {
                let mut encoder =
                    device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                for (i, ((step, p), bg)) in steps().enumerate() {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(&step.label),
                        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                            query_set: &set,
                            beginning_of_pass_write_index: Some(2 * i as u32),
                            end_of_pass_write_index: Some(2 * i as u32 + 1),
                        }),
                    });
                    pass.set_pipeline(p);
                    pass.set_bind_group(0, bg, &[]);
                    let [x, y, z] = step.workgroups;
                    pass.dispatch_workgroups(x, y, z);
                }
                encoder.resolve_query_set(&set, 0..count, &resolve, 0);
                encoder.copy_buffer_to_buffer(&resolve, 0, &read, 0, bytes);
                self.ctx.queue.submit([encoder.finish()]);
                read.map_async(wgpu::MapMode::Read, .., |_| {});
                self.wait()?;
                let ticks: Vec<u64> = {
                    let view = read
                        .get_mapped_range(..)
                        .map_err(|e| dev_err("profile readback", e))?;
                    view.chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                        .collect()
                };
                read.unmap();
                runs.push(
                    self.plan
                        .steps
                        .iter()
                        .enumerate()
                        .map(|(i, step)| {
                            let d = ticks[2 * i + 1].saturating_sub(ticks[2 * i]);
                            (step.label.clone(), d as f64 * period / 1e3)
                        })
                        .collect(),
                );
            }
            return Ok((runs, "gpu timestamps"));
        }
        for _ in 0..iters {
            let mut run = Vec::with_capacity(n);
            for ((step, p), bg) in steps() {
                let start = Instant::now();
                let mut encoder =
                    device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(&step.label),
                        timestamp_writes: None,
                    });
                    pass.set_pipeline(p);
                    pass.set_bind_group(0, bg, &[]);
                    let [x, y, z] = step.workgroups;
                    pass.dispatch_workgroups(x, y, z);
                }
                self.ctx.queue.submit([encoder.finish()]);
                self.wait()?;
                run.push((step.label.clone(), start.elapsed().as_secs_f64() * 1e6));
            }
            runs.push(run);
        }
        Ok((runs, "host clock"))
    }

    /// Times `iters` runs of the dispatches alone (inputs and weights stay where the last
    /// [`WgpuProgram::run`] put them): each run is one command buffer, submitted and waited
    /// for; milliseconds per run.
    ///
    /// # Errors
    /// A device failure.
    pub fn time_steps(&self, iters: usize) -> Result<Vec<f64>, WgpuError> {
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            let start = Instant::now();
            let mut encoder = self
                .ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            self.encode(&mut encoder);
            self.ctx.queue.submit([encoder.finish()]);
            self.wait()?;
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
        Ok(times)
    }

    /// Times the dispatches `reps` times back to back in one command buffer, `iters` times;
    /// milliseconds per repetition (submission overhead amortized).
    ///
    /// # Errors
    /// A device failure.
    pub fn time_steps_batched(&self, iters: usize, reps: usize) -> Result<Vec<f64>, WgpuError> {
        let reps = reps.max(1);
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            let start = Instant::now();
            let mut encoder = self
                .ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            for _ in 0..reps {
                self.encode(&mut encoder);
            }
            self.ctx.queue.submit([encoder.finish()]);
            self.wait()?;
            times.push(start.elapsed().as_secs_f64() * 1e3 / reps as f64);
        }
        Ok(times)
    }
}
