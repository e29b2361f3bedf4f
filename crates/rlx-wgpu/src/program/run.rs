//! Running a compiled wgpu program: host runs (inputs written through the queue, outputs
//! read back through the staging ring) and bound runs (device ranges copied in and out on
//! the device, in the run's one submission).

use super::*;
use rlx_ir::{Tensor, TensorData};

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
        let mut rb = self.readback.lock().unwrap_or_else(|e| e.into_inner());
        let queue = &self.ctx.queue;
        self.bind_weights(weights)?;
        for (name, b, buf) in &self.inputs {
            let t = inputs.get(name).ok_or_else(|| WgpuError::Binding {
                what: "input",
                name: name.clone(),
                message: "missing".into(),
            })?;
            check(&self.program, *b, t, "input", name)?;
            check_i64(t, "input", name)?;
            queue.write_buffer(buf.buffer(), buf.offset(), &tensor_words(t));
        }
        if rb.buffer.is_none() {
            rb.buffer = Some(self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("rlx readback"),
                size: rb.capacity as u64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        let staging = rb
            .buffer
            .clone()
            .ok_or_else(|| WgpuError::Invalid("no readback buffer".into()))?;
        let mut encoder = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("rlx run"),
            });
        self.encode(&mut encoder);
        let mut slots = Vec::with_capacity(self.outputs.len());
        for ((_, _, bytes), (src, off)) in self.outputs.iter().zip(&self.output_locs) {
            let padded = bytes.max(&4).next_multiple_of(4);
            let slot = rb
                .ring
                .alloc(padded, 256, &rlx_mem::Synchronous)
                .map_err(|e| WgpuError::Invalid(format!("readback staging: {e}")))?;
            encoder.copy_buffer_to_buffer(src, *off, &staging, slot.addr as u64, padded as u64);
            slots.push(slot);
        }
        self.ctx.queue.submit([encoder.finish()]);
        let result = std::sync::Arc::new(Mutex::new(None));
        let r2 = result.clone();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            *r2.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        });
        self.wait()?;
        // Another thread polling the same device may have collected this callback and not
        // yet run it when our poll returns: poll again briefly until it has, within a bound.
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match result.lock().unwrap_or_else(|e| e.into_inner()).take() {
                Some(Ok(())) => break,
                Some(Err(e)) => return Err(dev_err("map readback", e)),
                None if Instant::now() >= deadline => {
                    return Err(dev_err("map readback", "the mapping never completed"))
                }
                None => {}
            }
            let _ = self.ctx.device.poll(wgpu::PollType::Poll);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let mut out = Vec::with_capacity(self.outputs.len());
        {
            let view = staging
                .get_mapped_range(..)
                .map_err(|e| dev_err("get_mapped_range", e))?;
            let bytes: &[u8] = &view;
            for ((name, b, size), slot) in self.outputs.iter().zip(&slots) {
                let ty = &self.program.buffers[*b].ty;
                let raw = &bytes[slot.addr..slot.addr + size];
                let data = TensorData::from_le_bytes(ty.dtype, raw)
                    .ok_or_else(|| WgpuError::Invalid(format!("output {name}: bad size")))?;
                let shape = ty.shape.as_static().unwrap_or_default();
                out.push((
                    name.clone(),
                    Tensor::new(shape, data)
                        .map_err(|e| WgpuError::Invalid(format!("output {name}: {e}")))?,
                ));
            }
        }
        staging.unmap();
        for slot in slots {
            let token = rlx_mem::CompletionToken {
                stream: rlx_mem::StreamId(0),
                value: 0,
            };
            let _ = rb.ring.submit(slot, token);
        }
        rb.ring.retire(&rlx_mem::Synchronous);
        Ok(out)
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
        let mut rb = self.readback.lock().unwrap_or_else(|e| e.into_inner());
        self.bind_weights(weights)?;
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
                    self.ctx
                        .queue
                        .write_buffer(slot.buffer(), slot.offset(), &tensor_words(t));
                }
                BoundInput::Device {
                    buffer,
                    offset,
                    dtype,
                    shape,
                } => {
                    check_typed(&self.program, *b, *dtype, shape, "input", name)?;
                    let bytes = bytes_of(&self.program, *b) as u64;
                    crate::transfer::encode_copy(
                        &self.ctx.device,
                        &mut encoder,
                        (buffer, *offset),
                        (slot.buffer(), slot.offset()),
                        bytes,
                        &mut rb.bounce,
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
                &mut rb.bounce,
            );
        }
        self.ctx.queue.submit([encoder.finish()]);
        self.wait()
    }

    /// Checks the weights and uploads those whose tensor changed since the last run.
    fn bind_weights(&self, weights: &HashMap<String, Arc<Tensor>>) -> Result<(), WgpuError> {
        for (name, b, slot) in &self.params {
            let t = weights.get(name).ok_or_else(|| WgpuError::Binding {
                what: "param",
                name: name.clone(),
                message: "not set".into(),
            })?;
            check(&self.program, *b, t, "param", name)?;
            check_i64(t, "param", name)?;
            if slot.needs_upload(t) {
                self.ctx.queue.write_buffer(
                    slot.buffer().buffer(),
                    slot.buffer().offset(),
                    &tensor_words(t),
                );
            }
        }
        Ok(())
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
