//! Enqueuing steps: buffer addresses (home or bound), kernel and fused launches, cuBLASLt calls.

use super::*;

impl CudaProgram {
    /// The device address of `r`; a buffer whose root `rebind` names is read and written
    /// at the address given there (bound memory) instead of its home.
    pub(super) fn addr(&self, r: ArgRef, rebind: Rebind<'_>) -> u64 {
        if let ArgRef::Buffer(b) = r {
            let root = root(&self.program, b);
            if let Some(&(_, ptr)) = rebind.iter().find(|(at, _)| *at == root) {
                return ptr;
            }
        }
        match r {
            ArgRef::Scratch(i) => self.arena.ptr() + self.scratch_offsets[i] as u64,
            ArgRef::Buffer(b) => match &self.homes[root(&self.program, b)] {
                Some(Home::Arena(off)) => self.arena.ptr() + *off as u64,
                Some(Home::Input(i)) => self.inputs[*i].2.ptr(),
                Some(Home::Weight(s)) => s.buffer().ptr(),
                Some(Home::Constant(i)) => self.constants[*i].ptr(),
                None => 0,
            },
            ArgRef::Derived(i) => self.derived[i].buffer.ptr(),
        }
    }

    /// Enqueues every step (the part captured as a CUDA graph).
    pub(super) fn enqueue_steps(&self, rebind: Rebind<'_>) -> Result<(), CudaError> {
        (0..self.plan.steps.len()).try_for_each(|i| self.enqueue_step(i, rebind))
    }

    /// Enqueues step `i` as its route says.
    pub(super) fn enqueue_step(&self, i: usize, rebind: Rebind<'_>) -> Result<(), CudaError> {
        match self.route[i] {
            Route::Step => self.enqueue_planned(i, rebind),
            Route::Fused(c, t) => self.launch_fused(c, t, rebind),
            Route::Skip => Ok(()),
        }
    }

    /// Enqueues step `i` as planned.
    fn enqueue_planned(&self, i: usize, rebind: Rebind<'_>) -> Result<(), CudaError> {
        match &self.plan.steps[i] {
            Step::Kernel(k) => {
                let args: Vec<u64> = k.args.iter().map(|&a| self.addr(a, rebind)).collect();
                let f = self.functions[i]
                    .ok_or_else(|| CudaError::Invalid("missing function".into()))?;
                self.device.launch(
                    &f,
                    &k.launch,
                    &args,
                    &format!("{} ({})", k.function, k.label),
                )
            }
            Step::Gemm(_) => {
                let prepared = self.gemms[i]
                    .as_ref()
                    .ok_or_else(|| CudaError::Invalid("missing GEMM".into()))?;
                let blas = self
                    .blas
                    .as_ref()
                    .ok_or_else(|| CudaError::Invalid("missing cuBLASLt".into()))?;
                let ptrs = self
                    .gemm_pointers(i, rebind)
                    .ok_or_else(|| CudaError::Invalid("missing GEMM".into()))?;
                blas.run(prepared, &ptrs, self.device.stream())
            }
        }
    }

    /// The device addresses GEMM step `i` runs on (None for kernel steps).
    pub(super) fn gemm_pointers(
        &self,
        i: usize,
        rebind: Rebind<'_>,
    ) -> Option<crate::blas::GemmPointers> {
        let Step::Gemm(g) = &self.plan.steps[i] else {
            return None;
        };
        let size = g.dtype.size_bytes() as u64;
        let at = |o: &crate::gemm::Operand| self.addr(o.arg, rebind) + o.offset as u64 * size;
        Some(crate::blas::GemmPointers {
            a: at(&g.a),
            b: at(&g.b),
            c: at(&g.c),
            bias: g.bias.map(|b| self.addr(b, rebind)),
            // Read like the output: same offset, same layout.
            residual: g
                .residual
                .map(|r| self.addr(r, rebind) + g.c.offset as u64 * size),
            arrays: self
                .pointer_tables
                .get(i)
                .and_then(|t| t.as_ref().map(|t| t.ptr())),
        })
    }

    /// Launches tiling `t` of choice `ci`.
    pub(super) fn launch_fused(
        &self,
        ci: usize,
        t: usize,
        rebind: Rebind<'_>,
    ) -> Result<(), CudaError> {
        let k = &self.plan.choices[ci].fused[t];
        let args: Vec<u64> = k.args.iter().map(|&a| self.addr(a, rebind)).collect();
        self.device.launch(
            &self.choice_functions[ci][t],
            &k.launch,
            &args,
            &format!("{} ({})", k.function, k.label),
        )
    }
}
