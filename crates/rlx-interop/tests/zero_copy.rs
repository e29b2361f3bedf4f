//! CUDA↔Vulkan zero-copy on one GPU: CUDA fills a shared buffer, a WGSL shader reads it and
//! writes `x * 2 + 1` into the same buffer, and CUDA reads the result back, bytes identical;
//! then the reverse (Vulkan writes, CUDA transforms in place, Vulkan reads). Without CUDA or
//! without a Vulkan adapter on the same GPU with external memory each test prints
//! `SKIPPED: <reason>`.
#![cfg(all(unix, not(target_vendor = "apple")))]

#[allow(dead_code)]
mod support;

use rlx_interop::{Interop, SharedBuffer};
use support::shader::{bytes, read, values, Transform};

const N: usize = 1 << 20;

fn open(test: &str) -> Option<Interop> {
    match Interop::open() {
        Ok(pair) => {
            eprintln!(
                "{test}: {} with {:?} ordering{}",
                pair.vulkan.adapter_name,
                pair.ordering(),
                pair.host_ordering_reason()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            );
            Some(pair)
        }
        Err(e) => {
            rlx_driver::testing::skip(test, &e.to_string());
            None
        }
    }
}

#[test]
fn cuda_writes_vulkan_transforms_cuda_reads() {
    let Some(pair) = open("cuda_writes_vulkan_transforms_cuda_reads") else {
        return;
    };
    let shared = SharedBuffer::new(&pair, (2 * N * 4) as u64).unwrap();
    let input = values(N, 7);
    // The second half starts as a sentinel the shader must overwrite.
    let mut start = bytes(&input);
    start.extend(bytes(&vec![-1234.5f32; N]));
    pair.cuda.upload(shared.cuda_ptr(), &start).unwrap();
    pair.cuda_to_vulkan().unwrap();
    let transform = Transform::new(&pair.vulkan.device, N as u32);
    transform.submit(
        &pair.vulkan.device,
        &pair.vulkan.queue,
        shared.wgpu_buffer(),
    );
    pair.vulkan_to_cuda().unwrap();
    let mut out = vec![0u8; 2 * N * 4];
    pair.cuda.download(&mut out, shared.cuda_ptr()).unwrap();
    pair.cuda.sync().unwrap();
    let mut expected = bytes(&input);
    expected.extend(bytes(
        &input.iter().map(|v| v * 2.0 + 1.0).collect::<Vec<_>>(),
    ));
    assert!(out == expected, "CUDA reads what the Vulkan shader wrote");
}

#[test]
fn vulkan_writes_cuda_copies_vulkan_reads() {
    let Some(pair) = open("vulkan_writes_cuda_copies_vulkan_reads") else {
        return;
    };
    let half = (N * 4) as u64;
    let shared = SharedBuffer::new(&pair, 2 * half).unwrap();
    let input = values(N, 11);
    pair.vulkan
        .queue
        .write_buffer(shared.wgpu_buffer(), 0, &bytes(&input));
    let transform = Transform::new(&pair.vulkan.device, N as u32);
    transform.submit(
        &pair.vulkan.device,
        &pair.vulkan.queue,
        shared.wgpu_buffer(),
    );
    pair.vulkan_to_cuda().unwrap();
    // CUDA overwrites the first half with the shader's second half, in place.
    pair.cuda
        .copy(shared.cuda_ptr(), shared.cuda_ptr() + half, half as usize)
        .unwrap();
    pair.cuda_to_vulkan().unwrap();
    let out = read(
        &pair.vulkan.device,
        &pair.vulkan.queue,
        shared.wgpu_buffer(),
    );
    let transformed = bytes(&input.iter().map(|v| v * 2.0 + 1.0).collect::<Vec<_>>());
    assert!(
        out[..half as usize] == transformed[..],
        "Vulkan reads what CUDA copied"
    );
    assert!(
        out[half as usize..] == transformed[..],
        "the shader's half is intact"
    );
}

#[test]
fn hand_offs_alternate_many_times() {
    let Some(pair) = open("hand_offs_alternate_many_times") else {
        return;
    };
    let n = 4096usize;
    let shared = SharedBuffer::new(&pair, (2 * n * 4) as u64).unwrap();
    let transform = Transform::new(&pair.vulkan.device, n as u32);
    for round in 0..20u64 {
        let input = values(n, round + 100);
        pair.cuda.upload(shared.cuda_ptr(), &bytes(&input)).unwrap();
        pair.cuda_to_vulkan().unwrap();
        transform.submit(
            &pair.vulkan.device,
            &pair.vulkan.queue,
            shared.wgpu_buffer(),
        );
        pair.vulkan_to_cuda().unwrap();
        let mut out = vec![0u8; n * 4];
        pair.cuda
            .download(&mut out, shared.cuda_ptr() + (n * 4) as u64)
            .unwrap();
        pair.cuda.sync().unwrap();
        let expected = bytes(&input.iter().map(|v| v * 2.0 + 1.0).collect::<Vec<_>>());
        assert!(out == expected, "round {round}");
    }
}
