//! The CUDA provider's virtual-memory calls (cuMemAddressReserve / cuMemCreate / cuMemMap)
//! on a real device: raw map, write, read back, unmap; then rlx-mem's expandable
//! sub-allocator over them with data written through every allocation and checked after
//! frees and remaps. Prints `SKIPPED: <reason>` without a CUDA device.

use cudarc::driver::result;
use rlx_cuda::memory::CudaProvider;
use rlx_mem::{AllocatorConfig, BlockProvider, ExpandableConfig, SubAllocator};

fn device_ready(test: &str) -> bool {
    let a = rlx_cuda::probe::availability();
    if !a.available {
        rlx_driver::testing::skip(
            test,
            &format!("no CUDA device: {}", a.reason.unwrap_or_default()),
        );
        return false;
    }
    rlx_cuda::device::CudaDevice::get()
        .and_then(|d| d.bind())
        .expect("bind the device");
    true
}

fn write(addr: usize, bytes: usize, seed: u8) {
    let data: Vec<u8> = (0..bytes)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect();
    // SAFETY: `addr..addr + bytes` is mapped device memory owned by the caller.
    unsafe { result::memcpy_htod_sync(addr as u64, &data) }.expect("upload");
}

fn check(addr: usize, bytes: usize, seed: u8) {
    let mut back = vec![0u8; bytes];
    // SAFETY: as in `write`.
    unsafe { result::memcpy_dtoh_sync(&mut back, addr as u64) }.expect("download");
    for (i, b) in back.iter().enumerate() {
        assert_eq!(
            *b,
            (i as u8).wrapping_mul(31) ^ seed,
            "byte {i} of {addr:#x}"
        );
    }
}

#[test]
fn raw_map_write_read_unmap() {
    if !device_ready("raw_map_write_read_unmap") {
        return;
    }
    let mut p = CudaProvider::new();
    let g = p.granule_size().expect("the driver has VMM");
    assert!(g.is_power_of_two() && g >= 64 << 10, "granule {g}");
    let range = p.reserve_virtual(16 * g).unwrap();
    assert_eq!(range.addr % g, 0);
    let a = p.create_physical(g).unwrap();
    let b = p.create_physical(2 * g).unwrap();
    p.map(&range, 4 * g, &[a, b]).unwrap();
    write(range.addr + 4 * g, 3 * g, 7);
    check(range.addr + 4 * g, 3 * g, 7);
    // move `a` elsewhere: its bytes follow it
    p.unmap(&range, 4 * g, g);
    p.map(&range, 10 * g, &[a]).unwrap();
    check(range.addr + 10 * g, g, 7);
    p.unmap(&range, 10 * g, g);
    p.unmap(&range, 5 * g, 2 * g);
    p.release_physical(a);
    p.release_physical(b);
    p.release_virtual(range);
    let s = p.stats();
    assert_eq!((s.physical_creates, s.physical_releases), (2, 2));
    assert_eq!(
        (s.map_calls, s.unmap_calls, s.mapped_bytes, s.live_bytes),
        (2, 3, 0, 0)
    );
    // a size that is not a granule multiple is refused, not rounded
    assert!(p.create_physical(g + 1).is_err());
}

#[test]
fn expandable_suballocator_on_the_device() {
    if !device_ready("expandable_suballocator_on_the_device") {
        return;
    }
    let config = AllocatorConfig {
        expandable: Some(ExpandableConfig::default()),
        ..AllocatorConfig::default()
    };
    let mut pool = SubAllocator::new(Box::new(CudaProvider::new()), config);
    assert!(
        pool.is_expandable(),
        "the CUDA provider offers virtual memory"
    );
    let mut live = Vec::new();
    let mut rng = rlx_ir::SplitMix64(5);
    for step in 0..300u32 {
        if live.len() > 12 || (!live.is_empty() && rng.next_u64().is_multiple_of(3)) {
            let i = (rng.next_u64() as usize) % live.len();
            let (a, seed): (rlx_mem::Allocation, u8) = live.swap_remove(i);
            check(a.addr(), a.size().min(1 << 16), seed);
            pool.free(a).unwrap();
        } else {
            let bytes = 256 + (rng.next_u64() as usize % (24 << 20));
            let a = pool.alloc(bytes, 256).unwrap();
            assert_eq!(a.addr() % 256, 0);
            let seed = step as u8;
            write(a.addr(), bytes.min(1 << 16), seed);
            live.push((a, seed));
        }
    }
    for (a, seed) in live.drain(..) {
        check(a.addr(), a.size().min(1 << 16), seed);
        pool.free(a).unwrap();
    }
    let s = pool.stats();
    assert_eq!(s.bytes_in_use, 0);
    assert!(s.peak_bytes_reserved >= s.peak_bytes_in_use);
    pool.trim();
}

/// The process-wide device pool grows an expandable VMM segment (the default where the driver
/// has VMM), `RLX_CUDA_MEMORY=blocks`' kind does not; data survives, and after a scale hint the
/// pool reaches a large working set in few physical pieces.
#[test]
fn device_pool_is_expandable_and_takes_a_scale_hint() {
    use rlx_cuda::memory::DeviceMemory;
    use rlx_cuda::settings::MemoryKind;
    if !device_ready("device_pool_is_expandable_and_takes_a_scale_hint") {
        return;
    }
    let vmm = CudaProvider::new().granule_size().is_some();
    let mem = DeviceMemory::of(MemoryKind::Device).expect("device pool");
    assert_eq!(mem.is_expandable(), vmm, "expandable exactly where VMM is");
    let blocks = DeviceMemory::of(MemoryKind::Blocks).expect("block pool");
    assert!(!blocks.is_expandable());
    // 2 GiB in 64 buffers of 32 MiB after a 2 GiB hint: pieces of >= 16 MiB
    let before = mem.stats();
    mem.expect_peak(2 << 30);
    let bufs: Vec<_> = (0..64)
        .map(|_| mem.alloc(32 << 20).expect("alloc 32 MiB"))
        .collect();
    for (i, b) in bufs.iter().enumerate() {
        write(b.ptr() as usize, 1 << 12, i as u8);
    }
    for (i, b) in bufs.iter().enumerate() {
        check(b.ptr() as usize, 1 << 12, i as u8);
    }
    let after = mem.stats();
    let created = (after.provider_allocs + after.physical_creates)
        - (before.provider_allocs + before.physical_creates);
    println!("64 × 32 MiB: {created} provider allocations (expandable: {vmm})");
    if vmm {
        assert!(created <= 130, "{created} pieces for 2 GiB after the hint");
    }
    drop(bufs);
}
