//! Copies between host memory and device ranges, and between device ranges, outside any
//! program run: what device buffers (`rlx_runtime::DeviceBuffer` on wgpu) upload, download
//! and copy with. Uploads and downloads go through the context's staging pool
//! ([`crate::staging`]); the `*_direct` paths (no pool) are kept for comparison. wgpu moves
//! whole 4-byte words; callers pass word-aligned offsets.

use crate::memory::memory;
use crate::probe::Context;
use crate::{WgpuError, WgpuOptions};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn dev_err(call: &str, e: impl std::fmt::Display) -> WgpuError {
    WgpuError::Device {
        call: call.into(),
        message: e.to_string(),
    }
}

/// Waits for the queue, then reports any error wgpu collected meanwhile.
fn wait(ctx: &Context, call: &str) -> Result<(), WgpuError> {
    ctx.device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| dev_err("poll", e))?;
    check_errors(ctx, call)
}

/// Reports any error wgpu collected outside an error scope so far.
fn check_errors(ctx: &Context, call: &str) -> Result<(), WgpuError> {
    let errors = ctx.take_errors();
    if !errors.is_empty() {
        return Err(dev_err(call, errors.join("; ")));
    }
    Ok(())
}

/// Writes `bytes` (padded with zeros to whole words) at `offset` of `buffer` through the
/// context's staging pool, without waiting: the copy runs before any work submitted later,
/// and `bytes` may be reused on return. `options.staging_bytes == 0` writes through
/// `queue.write_buffer` instead (see [`write_direct`]).
///
/// # Errors
/// A staging buffer could not be created or mapped, or a device error reported so far.
pub fn write(
    ctx: &Arc<Context>,
    options: &WgpuOptions,
    buffer: &wgpu::Buffer,
    offset: u64,
    bytes: &[u8],
) -> Result<(), WgpuError> {
    if options.staging_bytes == 0 {
        return write_direct(ctx, buffer, offset, bytes);
    }
    let mem = memory(ctx);
    let mut pool = mem.staging(options.staging_bytes)?;
    pool.write(ctx, buffer, offset, bytes)?;
    pool.flush(ctx)?;
    check_errors(ctx, "write buffer")
}

/// The direct path: `queue.write_buffer` (wgpu stages the bytes in a fresh buffer per call),
/// and a wait.
///
/// # Errors
/// A device failure.
pub fn write_direct(
    ctx: &Context,
    buffer: &wgpu::Buffer,
    offset: u64,
    bytes: &[u8],
) -> Result<(), WgpuError> {
    if bytes.is_empty() {
        return Ok(());
    }
    let mut words = bytes.to_vec();
    words.resize(bytes.len().next_multiple_of(4), 0);
    ctx.queue.write_buffer(buffer, offset, &words);
    ctx.queue.submit([]);
    wait(ctx, "write buffer")
}

/// Records a copy of `len` bytes (rounded up to whole words) from `src` to `dst` (each a
/// buffer and byte offset). wgpu refuses a copy within one buffer, which sub-allocated
/// ranges often share: such a copy goes through `bounce`, a buffer kept by the caller and
/// grown as needed.
pub fn encode_copy(
    device: &wgpu::Device,
    encoder: &mut wgpu::CommandEncoder,
    src: (&wgpu::Buffer, u64),
    dst: (&wgpu::Buffer, u64),
    len: u64,
    bounce: &mut Option<wgpu::Buffer>,
) {
    let len = len.next_multiple_of(4);
    if len == 0 {
        return;
    }
    if src.0 != dst.0 {
        encoder.copy_buffer_to_buffer(src.0, src.1, dst.0, dst.1, len);
        return;
    }
    if bounce.as_ref().is_none_or(|b| b.size() < len) {
        *bounce = Some(device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rlx bounce"),
            size: len.next_power_of_two(),
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }));
    }
    if let Some(b) = bounce.as_ref() {
        encoder.copy_buffer_to_buffer(src.0, src.1, b, 0, len);
        encoder.copy_buffer_to_buffer(b, 0, dst.0, dst.1, len);
    }
}

/// Copies `len` bytes (rounded up to whole words) from `src` at `src_offset` to `dst` at
/// `dst_offset` on the device, and waits.
///
/// # Errors
/// A device failure.
pub fn copy(
    ctx: &Context,
    src: (&wgpu::Buffer, u64),
    dst: (&wgpu::Buffer, u64),
    len: u64,
) -> Result<(), WgpuError> {
    if len == 0 {
        return Ok(());
    }
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("rlx copy"),
        });
    let mut bounce = None;
    encode_copy(&ctx.device, &mut encoder, src, dst, len, &mut bounce);
    ctx.queue.submit([encoder.finish()]);
    wait(ctx, "copy buffer")
}

/// Reads `len` bytes at `offset` of `buffer` back to the host through the context's
/// staging pool (pipelined by chunk), after every write before it.
/// `options.staging_bytes == 0` reads through a fresh mapped buffer ([`read_direct`]).
///
/// # Errors
/// A staging buffer could not be created or mapped, or a device failure.
pub fn read(
    ctx: &Arc<Context>,
    options: &WgpuOptions,
    buffer: &wgpu::Buffer,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, WgpuError> {
    if options.staging_bytes == 0 {
        return read_direct(ctx, buffer, offset, len);
    }
    let mem = memory(ctx);
    let out = mem
        .staging(options.staging_bytes)?
        .read(ctx, buffer, offset, len)?;
    check_errors(ctx, "download")?;
    Ok(out)
}

/// The direct path: one fresh mapped buffer per read, and a wait.
///
/// # Errors
/// A device failure, or a mapping that never completes.
pub fn read_direct(
    ctx: &Context,
    buffer: &wgpu::Buffer,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, WgpuError> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let padded = (len as u64).next_multiple_of(4);
    let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("rlx download"),
        size: padded,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("rlx download"),
        });
    encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, padded);
    ctx.queue.submit([encoder.finish()]);
    let done = Arc::new(Mutex::new(None));
    let flag = done.clone();
    staging.map_async(wgpu::MapMode::Read, .., move |r| {
        *flag.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    });
    wait(ctx, "download")?;
    // another thread polling the device may run our callback a little later
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match done.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(Ok(())) => break,
            Some(Err(e)) => return Err(dev_err("map download", e)),
            None if Instant::now() >= deadline => {
                return Err(dev_err("map download", "the mapping never completed"))
            }
            None => {}
        }
        let _ = ctx.device.poll(wgpu::PollType::Poll);
        std::thread::sleep(Duration::from_millis(1));
    }
    let out = {
        let view = staging
            .get_mapped_range(..)
            .map_err(|e| dev_err("get_mapped_range", e))?;
        view[..len].to_vec()
    };
    staging.unmap();
    staging.destroy();
    Ok(out)
}

/// The context of a flavour's device, for transfers (see [`crate::probe::context`]).
///
/// # Errors
/// The device is unavailable (the reason).
pub fn context(flavor: crate::Flavor) -> Result<Arc<Context>, WgpuError> {
    crate::probe::context(flavor).map_err(WgpuError::Unavailable)
}
