//! Timing a compiled program with device events: each step alone, or whole runs of the steps.

use super::*;

impl CudaProgram {
    /// Times every step on its own (launched eagerly between two events, so launch gaps
    /// are excluded), `iters` times; returns per step its label and median milliseconds.
    /// Inputs and weights stay where the last [`CudaProgram::run`] put them.
    ///
    /// # Errors
    /// A device failure.
    pub fn profile_steps(&self, iters: usize) -> Result<Vec<(String, f64)>, CudaError> {
        let _state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let _queue = self.device.queue();
        self.device.bind()?;
        let mut out = Vec::with_capacity(self.plan.steps.len());
        for (i, step) in self.plan.steps.iter().enumerate() {
            if self.route[i] == Route::Skip {
                continue;
            }
            let mut times = Vec::with_capacity(iters.max(1));
            for _ in 0..iters.max(1) {
                let start = self.device.record()?;
                self.enqueue_step(i, &[])?;
                let end = self.device.record()?;
                times.push(self.device.elapsed_ms(&start, &end)? as f64);
            }
            times.sort_by(f64::total_cmp);
            let label = match (step, self.route[i]) {
                (_, Route::Fused(c, t)) => {
                    let k = &self.plan.choices[c].fused[t];
                    format!("{} ({})", k.function, k.label)
                }
                (Step::Kernel(k), _) => format!("{} ({})", k.function, k.label),
                (Step::Gemm(g), _) => {
                    let batching = self.gemms[i].as_ref().map(|p| p.batching);
                    format!(
                        "gemm {} [m{} n{} k{} b{}x{}{}] {batching:?}",
                        g.label,
                        g.m,
                        g.n,
                        g.k,
                        g.outer,
                        g.batch,
                        if g.trans_b { " B^T" } else { "" }
                    )
                }
            };
            out.push((label, times[times.len() / 2]));
        }
        Ok(out)
    }

    /// Times `iters` runs of the steps alone with device events (inputs and weights stay
    /// where the last [`CudaProgram::run`] put them), in milliseconds per run.
    ///
    /// # Errors
    /// A device failure.
    pub fn time_steps(&self, iters: usize) -> Result<Vec<f64>, CudaError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let _queue = self.device.queue();
        self.device.bind()?;
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            let start = self.device.record()?;
            self.launch_steps(&mut state, &[])?;
            let end = self.device.record()?;
            times.push(self.device.elapsed_ms(&start, &end)? as f64);
        }
        Ok(times)
    }
}
