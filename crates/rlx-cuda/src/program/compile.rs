//! Compiling a kernel program: plan, NVRTC modules, prepared GEMMs, planned arena, uploads.

use super::*;

impl CudaProgram {
    /// The device target programs are generated for.
    ///
    /// # Errors
    /// CUDA is unavailable.
    pub fn target() -> Result<Target, CudaError> {
        let f = crate::probe::device_facts().map_err(CudaError::Unavailable)?;
        Ok(Target {
            arch: f.arch(),
            sm_count: f.sm_count,
            max_shared: f.max_shared_per_block,
            walk_back_above: settings::walk_back().threshold(f.l2_bytes),
            flash_attention: settings::FLASH.switch(),
            flash_warps: settings::flash_warps(),
            flash_keys: settings::flash_keys(),
            flash_resident: settings::FLASH_RESIDENT.switch(),
            a_prologue: settings::A_PROLOGUE.switch(),
            tuning: settings::Tuning::from_env(),
        })
    }

    /// Plans, generates, compiles and loads `program`; allocates its memory and uploads its
    /// constants. Weights get slots in `weights` (uploaded at run time).
    ///
    /// # Errors
    /// Unsupported kernels (all listed), an NVRTC failure (with its log and the source's
    /// path), a cuBLASLt refusal, or out of memory.
    pub fn compile(
        program: KernelProgram,
        weights: &WeightCache,
        options: &CudaOptions,
    ) -> Result<CudaProgram, CudaError> {
        let device = CudaDevice::get()?;
        let queue_owner = device.clone();
        MemorySettings::get()?;
        let (mem, staging) = (DeviceMemory::of(options.memory)?, StagingPool::get()?);
        device.bind()?;
        let l2 = crate::probe::device_facts()
            .map_err(CudaError::Unavailable)?
            .l2_bytes;
        let target = Target {
            flash_attention: options.flash_attention,
            a_prologue: options.a_prologue,
            walk_back_above: options.walk_back.threshold(l2),
            ..Self::target()?
        };
        let plan = crate::plan::plan_with(&program, &target, options.merge_gemms)?;
        let mut stats = CompileStats {
            launches: plan.steps.len(),
            ..CompileStats::default()
        };
        let parts = program_sources(plan.all_kernels());
        let source = crate::codegen::program_source(plan.all_kernels());
        let modules = if parts.is_empty() {
            Modules::default()
        } else {
            let start = Instant::now();
            let sources: Vec<String> = parts.iter().map(|(s, _)| s.clone()).collect();
            let cubins = crate::nvrtc::compile_all_cached("rlx_program", &sources, &target.arch)?;
            stats.cached = cubins.iter().all(|c| c.cached);
            stats.nvrtc_ms = if stats.cached {
                0.0
            } else {
                start.elapsed().as_secs_f64() * 1e3
            };
            stats.modules = cubins.len();
            let mut modules = Modules::default();
            for ((_, names), cubin) in parts.iter().zip(&cubins) {
                modules.add(device.load_module(&cubin.image)?, names);
            }
            modules
        };
        let mut names = std::collections::HashSet::new();
        let mut functions = Vec::new();
        let needs_blas = plan.steps.iter().any(|s| matches!(s, Step::Gemm(_)));
        let blas = if needs_blas {
            Some(Blas::new(&mem)?)
        } else {
            None
        };
        let mut gemms = Vec::new();
        for step in &plan.steps {
            match step {
                Step::Kernel(k) => {
                    names.insert(k.function.clone());
                    functions.push(Some(modules.function(&k.function, k.launch.shared_bytes)?));
                    gemms.push(None);
                }
                Step::Gemm(g) => {
                    functions.push(None);
                    let b = blas
                        .as_ref()
                        .ok_or_else(|| CudaError::Invalid("GEMM without cuBLASLt".into()))?;
                    gemms.push(Some(b.prepare(g, options.tf32, options.pointer_arrays)?));
                }
            }
        }
        let mut choice_functions = Vec::with_capacity(plan.choices.len());
        for c in &plan.choices {
            let fs = c
                .fused
                .iter()
                .map(|k| modules.function(&k.function, k.launch.shared_bytes))
                .collect::<Result<Vec<_>, _>>()?;
            choice_functions.push(fs);
        }
        stats.functions = names.len();
        // A GEMM that loops over its outer batches launches once per outer batch.
        stats.launches = gemms
            .iter()
            .map(|g| match g {
                Some(g) if g.batching == crate::blas::Batching::Loop => g.spec.outer,
                _ => 1,
            })
            .sum();
        // Memory: one arena for temporaries and scratch, planned by lifetime.
        let n_steps = plan.steps.len();
        let buffers = crate::plan::arena::buffer_plan(&program, &plan)?;
        stats.arena_bytes = buffers.arena_bytes;
        // the scale of this program's memory (arena, inputs, weights, constants), so an
        // expandable segment creates pieces of that scale from the first allocation
        let owned: usize = (0..program.buffers.len())
            .filter(|&b| program.buffers[b].alias_of.is_none())
            .filter(|&b| !matches!(program.buffers[b].kind, BufferKind::Temp))
            .map(|b| buffer_bytes(&program, b))
            .sum();
        mem.expect_peak(buffers.arena_bytes + owned);
        let arena = mem.alloc(buffers.arena_bytes)?;
        let scratch_offsets = buffers.scratch.clone();
        let mut homes: Vec<Option<Home>> = (0..program.buffers.len())
            .map(|b| match buffers.homes[b] {
                BufferHome::Arena(offset) if buffers.roots[b] == b => Some(Home::Arena(offset)),
                _ => None,
            })
            .collect();
        // Params read only through derived buffers (merged GEMM weights) need no slot.
        let derived_only: std::collections::HashSet<usize> = plan
            .derived
            .iter()
            .flat_map(|d| d.sources.iter().map(|s| buffers.roots[s.0]))
            .filter(|&b| buffers.lifetimes[b].is_none())
            .collect();
        // the stream is this compile's from its first upload through tuning
        let _queue = queue_owner.queue();
        let (mut inputs, mut constants, mut params) = (Vec::new(), Vec::new(), Vec::new());
        for (b, buf) in program.buffers.iter().enumerate() {
            if buf.alias_of.is_some() || derived_only.contains(&b) {
                continue;
            }
            let bytes = buffer_bytes(&program, b);
            match &buf.kind {
                BufferKind::Input(name) => {
                    homes[b] = Some(Home::Input(inputs.len()));
                    inputs.push((name.clone(), b, mem.alloc(bytes)?, bytes));
                }
                BufferKind::Param(name) => {
                    let slot = weights.slot(name, bytes, |n| mem.alloc(n))?;
                    homes[b] = Some(Home::Weight(slot.clone()));
                    params.push((name.clone(), b, slot));
                }
                BufferKind::Constant(t) => {
                    let d = mem.alloc(bytes)?;
                    staging.upload(&[(d.ptr(), tensor_bytes(t))])?;
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
        let mut derived = Vec::with_capacity(plan.derived.len());
        for spec in &plan.derived {
            let mut sources = Vec::with_capacity(spec.sources.len());
            for &(b, _) in &spec.sources {
                let r = root(&program, b);
                sources.push(match &program.buffers[r].kind {
                    BufferKind::Param(name) => Source::Param(name.clone(), r),
                    BufferKind::Constant(t) => Source::Constant(tensor_bytes(t).to_vec()),
                    _ => {
                        return Err(CudaError::Invalid(format!(
                            "derived buffer from buffer {b}, not a param or constant"
                        )))
                    }
                });
            }
            let home = DerivedHome {
                spec: spec.clone(),
                buffer: mem.alloc(spec.bytes().max(1))?,
                sources,
                uploaded: Mutex::new(None),
            };
            if home
                .sources
                .iter()
                .all(|s| matches!(s, Source::Constant(_)))
            {
                home.upload(&staging, &[])?;
            }
            derived.push(home);
        }
        device.sync()?;
        let outputs: Vec<(String, usize, usize)> = program
            .outputs
            .iter()
            .map(|(n, b)| (n.clone(), *b, buffer_bytes(&program, *b)))
            .collect();
        let state = RunState {
            graph: None,
            bound: Vec::new(),
            graphs_ok: options.graphs,
        };
        let mut compiled = CudaProgram {
            device,
            program,
            plan,
            source,
            _modules: modules,
            functions,
            choice_functions,
            route: vec![Route::Step; n_steps],
            gemms,
            pointer_tables: Vec::new(),
            blas,
            arena,
            scratch_offsets,
            homes,
            inputs,
            constants,
            params,
            derived,
            outputs,
            state: Mutex::new(state),
            table_roots: Vec::new(),
            bind_direct: options.bind_direct,
            staging,
            prefetch: residency::PrefetchPlan::default(),
            stats,
        };
        compiled.upload_pointer_tables(&mem)?;
        compiled.prefetch = residency::PrefetchPlan::new(&compiled, mem, options.memory);
        let touches = compiled.plan.touches();
        for (i, t) in compiled.pointer_tables.iter().enumerate() {
            if t.is_some() {
                for r in touches.get(i).into_iter().flatten() {
                    if let ArgRef::Buffer(b) = *r {
                        compiled.table_roots.push(root(&compiled.program, b));
                    }
                }
            }
        }
        if options.autotune {
            compiled.autotune(options.tf32)?;
        }
        compiled.choose_fused(options)?;
        Ok(compiled)
    }

    /// Uploads the matrix-pointer table of every pointer-array GEMM (addresses are fixed once
    /// memory is planned, as the captured CUDA graph assumes too).
    fn upload_pointer_tables(&mut self, mem: &Arc<DeviceMemory>) -> Result<(), CudaError> {
        let mut tables = Vec::with_capacity(self.gemms.len());
        for g in &self.gemms {
            let table = g
                .as_ref()
                .and_then(|g| g.pointer_table(|op| self.addr(op.arg, &[])));
            tables.push(match table {
                Some(t) => {
                    let bytes: Vec<u8> = t.iter().flat_map(|p| p.to_le_bytes()).collect();
                    let d = mem.alloc(bytes.len())?;
                    self.staging.upload(&[(d.ptr(), &bytes)])?;
                    self.device.sync()?;
                    Some(d)
                }
                None => None,
            });
        }
        self.pointer_tables = tables;
        Ok(())
    }
}
