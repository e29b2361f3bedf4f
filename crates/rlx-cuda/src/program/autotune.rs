//! Timing at compile: cuBLASLt's algorithms per GEMM, each fused-GEMM choice against its steps.

use super::*;

impl CudaProgram {
    /// Decides each [`crate::plan::Choice`], in order: forced, timed against its steps as
    /// decided so far (when autotuning; decisions cached per process by the fused kernel's
    /// content hash, which names the problem and epilogue), or left to the planned steps.
    pub(super) fn choose_fused(&mut self, options: &CudaOptions) -> Result<(), CudaError> {
        static DECIDED: std::sync::OnceLock<Mutex<HashMap<String, Option<usize>>>> =
            std::sync::OnceLock::new();
        let start = Instant::now();
        let mut timed = 0;
        for ci in 0..self.plan.choices.len() {
            let c = &self.plan.choices[ci];
            let last = c.fused.len() - 1;
            if !route::nests(&self.route, &self.plan.choices, ci) {
                continue;
            }
            let pick = match options.fused_gemm {
                FusedGemm::Off => None,
                FusedGemm::Force(t) => Some(t.min(last)),
                FusedGemm::Timed if !options.autotune => None,
                FusedGemm::Timed => {
                    let key = c.fused[0].function.clone();
                    let cache = DECIDED.get_or_init(|| Mutex::new(HashMap::new()));
                    let known = cache
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(&key)
                        .copied();
                    match known {
                        Some(p) => p,
                        None if !self.writes_arena_only(ci) => None,
                        None => {
                            timed += 1;
                            let p = self.time_choice(ci, options.tune_log)?;
                            cache
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .insert(key, p);
                            p
                        }
                    }
                }
            };
            if let Some(t) = pick {
                let (launches, fused) = route::take(&mut self.route, &self.plan.choices, ci, t);
                self.stats.launches = self.stats.launches.saturating_add_signed(launches);
                self.stats.fused_gemms = self.stats.fused_gemms.saturating_add_signed(fused);
            }
        }
        if timed > 0 {
            self.stats.tune_ms += start.elapsed().as_secs_f64() * 1e3;
        }
        Ok(())
    }

    /// True when both ways of running choice `ci` write only arena memory (so they can be
    /// run for timing without changing inputs, weights or constants).
    fn writes_arena_only(&self, ci: usize) -> bool {
        let c = &self.plan.choices[ci];
        let in_arena = |a: ArgRef| match a {
            ArgRef::Scratch(_) => true,
            ArgRef::Buffer(b) => matches!(self.homes[root(&self.program, b)], Some(Home::Arena(_))),
            ArgRef::Derived(_) => false,
        };
        // a GEMM writes its c; a kernel its last argument, or its first when it runs in place
        let steps_out = c.steps().all(|i| match &self.plan.steps[i] {
            Step::Gemm(g) => in_arena(g.c.arg),
            Step::Kernel(k) => k.args.last().is_some_and(|&a| in_arena(a)) && in_arena(k.args[0]),
        });
        // fused kernels take operands a, b, then the output, then epilogue inputs
        let fused_out = c.fused.iter().all(|k| in_arena(k.args[2]));
        steps_out && fused_out
    }

    /// Times choice `ci`: its steps, run as decided so far (an inner choice's kernel runs in
    /// place of its steps), against each fused tiling, round-robin
    /// ([`crate::tune::fastest`]); Some(tiling) when a fused one is faster.
    fn time_choice(&self, ci: usize, log: bool) -> Result<Option<usize>, CudaError> {
        let c = &self.plan.choices[ci];
        let mut failure = None;
        let mut mins = vec![f64::INFINITY; c.fused.len() + 1];
        let best = crate::tune::fastest(c.fused.len() + 1, crate::tune::ROUNDS, |i| {
            let r = self
                .device
                .time_enqueued(crate::tune::WARMUP, crate::tune::TIMED, || {
                    if i == 0 {
                        c.steps().try_for_each(|s| self.enqueue_step(s, &[]))
                    } else {
                        self.launch_fused(ci, i - 1, &[])
                    }
                });
            match r {
                Ok(t) => {
                    mins[i] = mins[i].min(t);
                    Some(t)
                }
                Err(e) => {
                    if i == 0 {
                        failure = Some(e);
                    }
                    None
                }
            }
        });
        self.device.sync()?;
        if let Some(e) = failure {
            return Err(e);
        }
        if log {
            eprintln!("rlx-cuda: fused-GEMM choice {}", c.fused[0].label);
            eprintln!("  cuBLASLt + epilogue kernel: {:.4} ms", mins[0]);
            for (k, t) in c.fused.iter().zip(&mins[1..]) {
                eprintln!("  {}: {t:.4} ms", k.label);
            }
        }
        Ok(best.and_then(|(i, _)| i.checked_sub(1)))
    }

    /// Times cuBLASLt's candidate algorithms for every GEMM step on the program's own
    /// buffers and keeps the fastest (see [`Blas::tune`]). Only GEMMs writing the arena are
    /// timed (running one writes its result; inputs, weights and constants must keep their
    /// contents); the others keep the heuristic's first choice. Strided, pointer-array and
    /// per-outer-batch GEMMs are all tuned, each as it runs.
    pub(super) fn autotune(&mut self, tf32: bool) -> Result<(), CudaError> {
        let Some(blas) = self.blas.take() else {
            return Ok(());
        };
        let start = Instant::now();
        let mut tuned = 0;
        let mut result = Ok(());
        for i in 0..self.plan.steps.len() {
            let Some(ptrs) = self.gemm_pointers(i, &[]) else {
                continue;
            };
            let writes_arena = match &self.plan.steps[i] {
                Step::Gemm(g) => match g.c.arg {
                    ArgRef::Scratch(_) => true,
                    ArgRef::Buffer(b) => {
                        matches!(self.homes[root(&self.program, b)], Some(Home::Arena(_)))
                    }
                    ArgRef::Derived(_) => false,
                },
                Step::Kernel(_) => false,
            };
            let Some(g) = self.gemms[i].as_mut().filter(|_| writes_arena) else {
                continue;
            };
            match blas.tune(g, &ptrs, &self.device, tf32) {
                Ok(timed) => tuned += usize::from(timed),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.blas = Some(blas);
        if tuned > 0 {
            self.stats.tune_ms = start.elapsed().as_secs_f64() * 1e3;
        }
        self.stats.tuned_gemms = tuned;
        result
    }
}
