//! Running a program: host and bound runs, weight and derived-buffer uploads, binding checks.

use super::*;

impl CudaProgram {
    /// Runs with inputs by name and weights by name.
    ///
    /// # Errors
    /// A missing or mistyped input or weight, or a device failure (naming the kernel).
    pub fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        weights: &HashMap<String, Arc<Tensor>>,
    ) -> Result<Vec<(String, Tensor)>, CudaError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let _queue = self.device.queue();
        self.device.bind()?;
        self.prefetch.before_run()?;
        self.bind_weights(weights)?;
        let mut copies = Vec::with_capacity(self.inputs.len());
        for (name, b, buf, _) in &self.inputs {
            let t = inputs.get(name).ok_or_else(|| CudaError::Binding {
                what: "input",
                name: name.clone(),
                message: "missing".into(),
            })?;
            check(&self.program, *b, t, "input", name)?;
            copies.push((buf.ptr(), tensor_bytes(t)));
        }
        self.staging.upload(&copies)?;
        self.launch_steps(&mut state, &[])?;
        let out = self.download_outputs()?;
        self.device.sync()?;
        Ok(out)
    }

    /// Reads every output back through the staging pool, after the work enqueued so far.
    fn download_outputs(&self) -> Result<Vec<(String, Tensor)>, CudaError> {
        let ranges: Vec<(u64, usize)> = self
            .outputs
            .iter()
            .map(|(_, b, bytes)| (self.addr(ArgRef::Buffer(*b), &[]), *bytes))
            .collect();
        let dtype = |i: usize| self.program.buffers[self.outputs[i].1].ty.dtype;
        // an output in one chunk is read straight from the pool; larger ones are gathered
        let mut whole: Vec<Option<TensorData>> = vec![None; ranges.len()];
        let mut parts: Vec<Vec<u8>> = vec![Vec::new(); ranges.len()];
        self.staging.download_with(&ranges, |i, off, bytes| {
            if off == 0 && bytes.len() == ranges[i].1 {
                whole[i] = TensorData::from_le_bytes(dtype(i), bytes);
            } else {
                parts[i].extend_from_slice(bytes);
            }
        })?;
        let mut out = Vec::with_capacity(self.outputs.len());
        for (i, (name, b, _)) in self.outputs.iter().enumerate() {
            let ty = &self.program.buffers[*b].ty;
            let data = whole[i]
                .take()
                .or_else(|| TensorData::from_le_bytes(ty.dtype, &parts[i]))
                .ok_or_else(|| CudaError::Invalid(format!("output {name}: bad size")))?;
            let shape = ty.shape.as_static().unwrap_or_default();
            out.push((
                name.clone(),
                Tensor::new(shape, data)
                    .map_err(|e| CudaError::Invalid(format!("output {name}: {e}")))?,
            ));
        }
        Ok(out)
    }

    /// Runs with inputs that are host tensors or device memory, writing each output named
    /// in `outputs` to its device address; nothing goes through host memory but host
    /// inputs. Bound memory is read and written in place where it is 256-byte aligned (the
    /// kernels take its addresses: a CUDA graph is captured per set of addresses, the
    /// `BOUND_GRAPHS` (4) most recent kept); otherwise, or with
    /// [`CudaOptions::bind_direct`] off, device inputs are copied on the device into the
    /// program's input slots and outputs out of its arena. Returns once the outputs are
    /// written.
    ///
    /// # Errors
    /// A missing or mistyped input or weight, an unknown output, or a device failure.
    pub fn run_bound(
        &self,
        inputs: &HashMap<String, BoundInput<'_>>,
        weights: &HashMap<String, Arc<Tensor>>,
        outputs: &[(String, u64)],
    ) -> Result<(), CudaError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let _queue = self.device.queue();
        self.device.bind()?;
        self.prefetch.before_run()?;
        self.bind_weights(weights)?;
        let aligned = |p: u64| self.bind_direct && p.is_multiple_of(ALIGN as u64);
        let mut rebind: Vec<(usize, u64)> = Vec::new();
        let mut read: Vec<(u64, u64)> = Vec::new();
        let mut uploads = Vec::new();
        for (name, b, slot, bytes) in &self.inputs {
            let given = inputs.get(name).ok_or_else(|| CudaError::Binding {
                what: "input",
                name: name.clone(),
                message: "missing".into(),
            })?;
            match given {
                BoundInput::Host(t) => {
                    check(&self.program, *b, t, "input", name)?;
                    uploads.push((slot.ptr(), tensor_bytes(t)));
                }
                BoundInput::Device { ptr, dtype, shape } => {
                    check_typed(&self.program, *b, *dtype, shape, "input", name)?;
                    read.push((*ptr, *ptr + *bytes as u64));
                    let r = root(&self.program, *b);
                    if aligned(*ptr) && !self.table_roots.contains(&r) {
                        rebind.push((r, *ptr));
                    } else if *bytes > 0 {
                        self.device.copy(slot.ptr(), *ptr, *bytes)?;
                    }
                }
            }
        }
        self.staging.upload(&uploads)?;
        let mut copies = Vec::new();
        for (name, dst) in outputs {
            let (_, b, bytes) =
                self.outputs
                    .iter()
                    .find(|(n, _, _)| n == name)
                    .ok_or_else(|| CudaError::Binding {
                        what: "output",
                        name: name.clone(),
                        message: "the program has no such output".into(),
                    })?;
            let r = root(&self.program, *b);
            let end = *dst + *bytes as u64;
            // written in place only where it is the output's own memory: an arena result
            // (not an input, weight or constant), bound once, overlapping no input
            let direct = aligned(*dst)
                && matches!(self.homes[r], Some(Home::Arena(_)))
                && !self.table_roots.contains(&r)
                && !rebind.iter().any(|(at, _)| *at == r)
                && !read.iter().any(|&(lo, hi)| *dst < hi && lo < end);
            if direct {
                rebind.push((r, *dst));
            } else {
                copies.push((*dst, *b, *bytes));
            }
        }
        rebind.sort_unstable();
        self.launch_steps(&mut state, &rebind)?;
        for (dst, b, bytes) in copies {
            if bytes > 0 {
                self.device
                    .copy(dst, self.addr(ArgRef::Buffer(b), &rebind), bytes)?;
            }
        }
        self.device.sync()
    }

    /// Checks the weights and uploads those whose tensor changed since the last run.
    fn bind_weights(&self, weights: &HashMap<String, Arc<Tensor>>) -> Result<(), CudaError> {
        for (name, b, slot) in &self.params {
            let t = weights.get(name).ok_or_else(|| CudaError::Binding {
                what: "param",
                name: name.clone(),
                message: "not set".into(),
            })?;
            check(&self.program, *b, t, "param", name)?;
            if slot.needs_upload(t) {
                // the pool holds the bytes once this returns; no wait for the transfer
                let upload = [(slot.buffer().ptr(), tensor_bytes(t))];
                if let Err(e) = self.staging.upload(&upload) {
                    slot.invalidate();
                    return Err(e);
                }
            }
        }
        for d in &self.derived {
            d.bind(&self.staging, &self.program, weights)?;
        }
        Ok(())
    }
}

impl DerivedHome {
    /// Checks this buffer's params in `weights` and uploads the concatenation again when
    /// one of them is a different tensor than last time.
    fn bind(
        &self,
        staging: &StagingPool,
        program: &KernelProgram,
        weights: &HashMap<String, Arc<Tensor>>,
    ) -> Result<(), CudaError> {
        let mut bound = Vec::with_capacity(self.sources.len());
        for s in &self.sources {
            bound.push(match s {
                Source::Param(name, b) => {
                    let t = weights.get(name).ok_or_else(|| CudaError::Binding {
                        what: "param",
                        name: name.clone(),
                        message: "not set".into(),
                    })?;
                    check(program, *b, t, "param", name)?;
                    Some(t.clone())
                }
                Source::Constant(_) => None,
            });
        }
        let mut last = self.uploaded.lock().unwrap_or_else(|e| e.into_inner());
        let same = last.as_ref().is_some_and(|l| {
            l.iter().zip(&bound).all(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            })
        });
        if same {
            return Ok(());
        }
        *last = None;
        self.upload(staging, &bound)?;
        *last = Some(bound);
        Ok(())
    }

    /// Uploads the concatenation of the sources (`bound`: the param tensors, per source).
    pub(super) fn upload(
        &self,
        staging: &StagingPool,
        bound: &[Option<Arc<Tensor>>],
    ) -> Result<(), CudaError> {
        let parts: Vec<&[u8]> = self
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| match s {
                Source::Constant(bytes) => bytes.as_slice(),
                Source::Param(..) => bound
                    .get(i)
                    .and_then(|t| t.as_deref())
                    .map_or(&[][..], tensor_bytes),
            })
            .collect();
        let bytes = self.spec.concat(&parts);
        staging.upload(&[(self.buffer.ptr(), &bytes)])
    }
}

fn check(
    program: &KernelProgram,
    b: usize,
    t: &Tensor,
    what: &'static str,
    name: &str,
) -> Result<(), CudaError> {
    check_typed(program, b, t.dtype(), t.shape(), what, name)
}

fn check_typed(
    program: &KernelProgram,
    b: usize,
    dtype: DType,
    shape: &[usize],
    what: &'static str,
    name: &str,
) -> Result<(), CudaError> {
    match program.buffer_mismatch(b, dtype, shape) {
        Some(message) => Err(CudaError::Binding {
            what,
            name: name.to_string(),
            message,
        }),
        None => Ok(()),
    }
}

/// An input of [`CudaProgram::run_bound`]: a host tensor, or device memory of a dtype and
/// shape.
pub enum BoundInput<'a> {
    /// uploaded through the staging pool
    Host(&'a Tensor),
    /// read on the device
    Device {
        /// the device address of the first element
        ptr: u64,
        /// the element type
        dtype: DType,
        /// the dims
        shape: &'a [usize],
    },
}
