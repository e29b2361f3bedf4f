//! The staging pool on a real device: round trips of awkward sizes through a pool much
//! smaller than the copies (wrapping, waiting, chunking), checked against plain synchronous
//! driver copies; batches of many small copies; the caller's memory reused at once while the
//! copies are still in flight; pool copies ordered with other work on the stream; several
//! threads sharing the process pool. Prints `SKIPPED: <reason>` without a CUDA device.

mod support;

use cudarc::driver::result;
use rlx_cuda::device::CudaDevice;
use rlx_cuda::memory::DeviceMemory;
use rlx_cuda::settings::{MemoryKind, MemorySettings};
use rlx_cuda::staging::StagingPool;
use std::sync::Arc;

fn device_ready(test: &str) -> Option<Arc<CudaDevice>> {
    support::cuda_device(test)
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The device bytes, read with a plain synchronous copy (not through any pool).
fn read_plain(ptr: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: `ptr..ptr + len` is device memory the test owns; the stream was synchronized.
    unsafe { result::memcpy_dtoh_sync(&mut out, ptr) }.expect("cuMemcpyDtoH");
    out
}

fn write_plain(ptr: u64, data: &[u8]) {
    // SAFETY: as in `read_plain`.
    unsafe { result::memcpy_htod_sync(ptr, data) }.expect("cuMemcpyHtoD");
    // from pageable memory the call may return before the transfer lands, and the backend's
    // stream does not wait for the legacy stream
    result::ctx::synchronize().expect("cuCtxSynchronize");
}

#[test]
fn awkward_sizes_round_trip_through_a_small_pool() {
    let Some(device) = device_ready("awkward_sizes_round_trip_through_a_small_pool") else {
        return;
    };
    let mem = DeviceMemory::of(MemoryKind::Device).unwrap();
    let pool = StagingPool::new(&device, 64 << 10, 16 << 10).unwrap();
    assert_eq!((pool.capacity(), pool.chunk()), (64 << 10, 16 << 10));
    let sizes = [
        1usize,
        255,
        4096,
        16 << 10,
        (16 << 10) + 1,
        64 << 10,
        200_003,
        (3 << 20) + 5,
    ];
    for (i, &len) in sizes.iter().enumerate() {
        let buf = mem.alloc(len).unwrap();
        let want = pattern(i as u64, len);
        let _queue = device.queue();
        let mut data = want.clone();
        pool.upload(&[(buf.ptr(), &data)]).unwrap();
        // the pool holds its own copy: the caller's bytes may change at once
        data.iter_mut().for_each(|b| *b = !*b);
        device.sync().unwrap();
        assert!(read_plain(buf.ptr(), len) == want, "upload of {len} bytes");
        let other = pattern(100 + i as u64, len);
        write_plain(buf.ptr(), &other);
        let mut back = vec![0u8; len];
        pool.download(&mut [(buf.ptr(), &mut back[..])]).unwrap();
        assert!(back == other, "download of {len} bytes");
    }
    let s = pool.stats();
    println!("{s:?}");
    assert!(
        s.waits > 0,
        "copies larger than the pool never waited: {s:?}"
    );
    assert!(s.chunks as usize >= 2 * ((3 << 20) / (16 << 10)), "{s:?}");
}

#[test]
fn batches_of_small_copies_land_at_their_offsets() {
    let Some(device) = device_ready("batches_of_small_copies_land_at_their_offsets") else {
        return;
    };
    let mem = DeviceMemory::of(MemoryKind::Device).unwrap();
    let pool = StagingPool::new(&device, 256 << 10, 32 << 10).unwrap();
    let total = 2 << 20;
    let buf = mem.alloc(total).unwrap();
    write_plain(buf.ptr(), &vec![0u8; total]);
    let mut pieces = Vec::new();
    let mut at = 0usize;
    for i in 0..400u64 {
        let len = 1 + (i as usize * 977) % 5000;
        pieces.push((at, pattern(i, len)));
        at += len + (i as usize % 7) * 64;
    }
    assert!(at < total);
    let _queue = device.queue();
    let uploads: Vec<(u64, &[u8])> = pieces
        .iter()
        .map(|(off, d)| (buf.ptr() + *off as u64, &d[..]))
        .collect();
    pool.upload(&uploads).unwrap();
    let mut back: Vec<Vec<u8>> = pieces.iter().map(|(_, d)| vec![0u8; d.len()]).collect();
    let mut downloads: Vec<(u64, &mut [u8])> = pieces
        .iter()
        .zip(back.iter_mut())
        .map(|((off, _), b)| (buf.ptr() + *off as u64, &mut b[..]))
        .collect();
    pool.download(&mut downloads).unwrap();
    let plain = read_plain(buf.ptr(), total);
    for ((off, d), b) in pieces.iter().zip(&back) {
        assert!(b == d, "piece at {off} through the pool");
        assert!(
            plain[*off..off + d.len()] == d[..],
            "piece at {off} on the device"
        );
    }
}

#[test]
fn pool_copies_keep_their_place_among_other_stream_work() {
    let Some(device) = device_ready("pool_copies_keep_their_place_among_other_stream_work") else {
        return;
    };
    let mem = DeviceMemory::of(MemoryKind::Device).unwrap();
    let pool = StagingPool::new(&device, 1 << 20, 256 << 10).unwrap();
    let len = 3 << 20;
    let (x, y) = (mem.alloc(len).unwrap(), mem.alloc(len).unwrap());
    let a = pattern(1, len);
    let b = pattern(2, len);
    let _queue = device.queue();
    // one host buffer used for both uploads, rewritten between them without a sync
    let mut host = a.clone();
    pool.upload(&[(x.ptr(), &host)]).unwrap();
    device.copy(y.ptr(), x.ptr(), len).unwrap();
    host.copy_from_slice(&b);
    pool.upload(&[(x.ptr(), &host)]).unwrap();
    let (mut got_x, mut got_y) = (vec![0u8; len], vec![0u8; len]);
    pool.download(&mut [(x.ptr(), &mut got_x[..]), (y.ptr(), &mut got_y[..])])
        .unwrap();
    assert!(got_y == a, "the device copy saw the first upload");
    assert!(got_x == b, "the second upload landed after the device copy");
}

#[test]
fn threads_share_the_process_pool() {
    let Some(device) = device_ready("threads_share_the_process_pool") else {
        return;
    };
    let pool = StagingPool::get().unwrap();
    let s = MemorySettings::get().unwrap();
    assert_eq!(pool.capacity(), s.staging_bytes.max(8192));
    assert_eq!(pool.chunk(), s.chunk());
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let device = device.clone();
            let pool = pool.clone();
            std::thread::spawn(move || {
                device.bind().unwrap();
                let mem = DeviceMemory::of(MemoryKind::Device).unwrap();
                for round in 0..20u64 {
                    let len = 1 + ((t * 31 + round * 7919) as usize * 4099) % (9 << 20);
                    let buf = mem.alloc(len).unwrap();
                    let want = pattern(t * 1000 + round, len);
                    let mut back = vec![0u8; len];
                    {
                        let _queue = device.queue();
                        pool.upload(&[(buf.ptr(), &want)]).unwrap();
                        pool.download(&mut [(buf.ptr(), &mut back[..])]).unwrap();
                    }
                    assert!(back == want, "thread {t} round {round}: {len} bytes");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a thread failed");
    }
    pool.flush().unwrap();
}
