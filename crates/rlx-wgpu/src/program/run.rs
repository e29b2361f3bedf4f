//! Running a compiled wgpu program: host runs (inputs and changed weights staged through
//! the context's staging pool, outputs copied into its download chunks by the run's own
//! submission) and bound runs (device ranges copied in and out on
//! the device, in the run's one submission).

use super::*;
use crate::staging::StagingPool;
use rlx_ir::{Tensor, TensorData};
use std::sync::MutexGuard;

impl WgpuProgram {
    /// Runs with inputs by name and weights by name.
    ///
    /// # Errors
    /// A missing or mistyped input or weight, an i64 value outside the 32-bit range the
    /// kernels compute in, or a device failure.
    pub fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        weights: &HashMap<String, Arc<Tensor>>,
    ) -> Result<Vec<(String, Tensor)>, WgpuError> {
        let _running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        // every input checked before anything is copied
        let mut host = Vec::with_capacity(self.inputs.len());
        for (name, b, buf) in &self.inputs {
            let t = inputs.get(name).ok_or_else(|| WgpuError::Binding {
                what: "input",
                name: name.clone(),
                message: "missing".into(),
            })?;
            check(&self.program, *b, t, "input", name)?;
            check_i64(t, "input", name)?;
            host.push((t, buf));
        }
        let mut uploads = self.uploads()?;
        self.bind_weights(&mut uploads, weights)?;
        for (t, buf) in host {
            uploads.write(&self.ctx, buf.buffer(), buf.offset(), t.data().as_bytes())?;
        }
        let mut encoder = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("rlx run"),
            });
        self.encode(&mut encoder);
        let outs: Vec<(wgpu::Buffer, u64, usize)> = self
            .outputs
            .iter()
            .zip(&self.output_locs)
            .map(|((_, _, bytes), (src, off))| (src.clone(), *off, *bytes))
            .collect();
        let raw = match &mut uploads {
            Uploads::Pool(pool) => {
                pool.flush(&self.ctx)?;
                let batch = pool.stage_reads(&self.ctx, &mut encoder, &outs)?;
                let index = self.ctx.queue.submit([encoder.finish()]);
                pool.finish_reads(&self.ctx, batch, index)?
            }
            Uploads::Direct => {
                self.ctx.queue.submit([encoder.finish()]);
                self.wait()?;
                outs.iter()
                    .map(|(src, off, len)| crate::transfer::read_direct(&self.ctx, src, *off, *len))
                    .collect::<Result<_, _>>()?
            }
        };
        drop(uploads);
        self.wait()?;
        let mut out = Vec::with_capacity(self.outputs.len());
        for ((name, b, _), raw) in self.outputs.iter().zip(&raw) {
            let ty = &self.program.buffers[*b].ty;
            let data = TensorData::from_le_bytes(ty.dtype, raw)
                .ok_or_else(|| WgpuError::Invalid(format!("output {name}: bad size")))?;
            let shape = ty.shape.as_static().unwrap_or_default();
            out.push((
                name.clone(),
                Tensor::new(shape, data)
                    .map_err(|e| WgpuError::Invalid(format!("output {name}: {e}")))?,
            ));
        }
        Ok(out)
    }

    /// Where this program's runs write host bytes.
    fn uploads(&self) -> Result<Uploads<'_>, WgpuError> {
        Ok(match self.staging_bytes {
            0 => Uploads::Direct,
            bytes => Uploads::Pool(self.mem.staging(bytes)?),
        })
    }

    /// Runs with inputs that are host tensors or device ranges, writing each output named
    /// in `outputs` to its device range; nothing goes through host memory but host inputs.
    /// Device inputs are copied on the device into the program's input ranges and outputs
    /// out of its arena (bind groups are built at compile), in the run's one submission;
    /// returns once the outputs are written. i64 values in device inputs are not checked
    /// against the 32 bits the kernels compute in.
    ///
    /// # Errors
    /// A missing or mistyped input or weight, an unknown output, or a device failure.
    pub fn run_bound(
        &self,
        inputs: &HashMap<String, BoundInput<'_>>,
        weights: &HashMap<String, Arc<Tensor>>,
        outputs: &[(String, &wgpu::Buffer, u64)],
    ) -> Result<(), WgpuError> {
        // one run of this program at a time, as `run`
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let mut uploads = self.uploads()?;
        self.bind_weights(&mut uploads, weights)?;
        let mut encoder = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("rlx bound run"),
            });
        for (name, b, slot) in &self.inputs {
            let given = inputs.get(name).ok_or_else(|| WgpuError::Binding {
                what: "input",
                name: name.clone(),
                message: "missing".into(),
            })?;
            match given {
                BoundInput::Host(t) => {
                    check(&self.program, *b, t, "input", name)?;
                    check_i64(t, "input", name)?;
                    uploads.write(&self.ctx, slot.buffer(), slot.offset(), t.data().as_bytes())?;
                }
                BoundInput::Device {
                    buffer,
                    offset,
                    dtype,
                    shape,
                } => {
                    check_typed(&self.program, *b, *dtype, shape, "input", name)?;
                    let bytes = buffer_bytes(&self.program, *b) as u64;
                    crate::transfer::encode_copy(
                        &self.ctx.device,
                        &mut encoder,
                        (buffer, *offset),
                        (slot.buffer(), slot.offset()),
                        bytes,
                        &mut running.bounce,
                    );
                }
            }
        }
        self.encode(&mut encoder);
        for (name, dst, dst_offset) in outputs {
            let i = self
                .outputs
                .iter()
                .position(|(n, _, _)| n == name)
                .ok_or_else(|| WgpuError::Binding {
                    what: "output",
                    name: name.clone(),
                    message: "the program has no such output".into(),
                })?;
            let bytes = self.outputs[i].2 as u64;
            let (src, src_offset) = &self.output_locs[i];
            crate::transfer::encode_copy(
                &self.ctx.device,
                &mut encoder,
                (src, *src_offset),
                (dst, *dst_offset),
                bytes,
                &mut running.bounce,
            );
        }
        if let Uploads::Pool(pool) = &mut uploads {
            pool.flush(&self.ctx)?;
        }
        self.ctx.queue.submit([encoder.finish()]);
        self.wait()
    }

    /// Checks the weights and uploads those whose tensor changed since the last run.
    fn bind_weights(
        &self,
        uploads: &mut Uploads<'_>,
        weights: &HashMap<String, Arc<Tensor>>,
    ) -> Result<(), WgpuError> {
        for (name, b, slot) in &self.params {
            let t = weights.get(name).ok_or_else(|| WgpuError::Binding {
                what: "param",
                name: name.clone(),
                message: "not set".into(),
            })?;
            check(&self.program, *b, t, "param", name)?;
            check_i64(t, "param", name)?;
            if slot.needs_upload(t) {
                let dst = slot.buffer();
                uploads.write(&self.ctx, dst.buffer(), dst.offset(), t.data().as_bytes())?;
            }
        }
        Ok(())
    }
}

/// Where a run's host bytes go: the context's staging pool (held for the whole run), or
/// `queue.write_buffer` when the pool is off.
enum Uploads<'a> {
    Pool(MutexGuard<'a, StagingPool>),
    Direct,
}

impl Uploads<'_> {
    fn write(
        &mut self,
        ctx: &Context,
        dst: &wgpu::Buffer,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), WgpuError> {
        match self {
            Uploads::Pool(pool) => pool.write(ctx, dst, offset, bytes),
            Uploads::Direct if bytes.is_empty() => Ok(()),
            Uploads::Direct => {
                let mut words = bytes.to_vec();
                words.resize(bytes.len().next_multiple_of(4), 0);
                ctx.queue.write_buffer(dst, offset, &words);
                Ok(())
            }
        }
    }
}

/// An input of [`WgpuProgram::run_bound`]: a host tensor, or a device range of a dtype and
/// shape.
pub enum BoundInput<'a> {
    /// written through the queue
    Host(&'a Tensor),
    /// copied on the device
    Device {
        /// the wgpu buffer
        buffer: &'a wgpu::Buffer,
        /// the first byte's offset in it (a multiple of 4)
        offset: u64,
        /// the element type
        dtype: DType,
        /// the dims
        shape: &'a [usize],
    },
}

fn check_typed(
    program: &KernelProgram,
    b: usize,
    dtype: DType,
    shape: &[usize],
    what: &'static str,
    name: &str,
) -> Result<(), WgpuError> {
    match program.buffer_mismatch(b, dtype, shape) {
        Some(message) => Err(WgpuError::Binding {
            what,
            name: name.to_string(),
            message,
        }),
        None => Ok(()),
    }
}

fn check(
    program: &KernelProgram,
    b: usize,
    t: &Tensor,
    what: &'static str,
    name: &str,
) -> Result<(), WgpuError> {
    check_typed(program, b, t.dtype(), t.shape(), what, name)
}

/// i64 tensors are computed in 32 bits: refuse values that do not fit.
pub(super) fn check_i64(t: &Tensor, what: &'static str, name: &str) -> Result<(), WgpuError> {
    if t.dtype() != DType::I64 {
        return Ok(());
    }
    if let TensorData::I64(v) = t.data() {
        if let Some(bad) = v.iter().find(|x| i32::try_from(**x).is_err()) {
            return Err(WgpuError::Binding {
                what,
                name: name.to_string(),
                message: format!(
                    "i64 value {bad} does not fit in 32 bits; WGSL kernels compute i64 in 32 bits"
                ),
            });
        }
    }
    Ok(())
}
