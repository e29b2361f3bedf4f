#!/usr/bin/env python3
"""The numpy/OpenBLAS peer of `rlx-cpu`'s bench_cpu example: SGEMM GFLOP/s for square sizes
and a memcpy of 64M f32, medians over repeated runs. Needs: pip install numpy threadpoolctl.
Run it in the same command as the Rust bench (scripts/bench/cpu.sh) so both see one machine."""
import os, time, json
import numpy as np

try:
    from threadpoolctl import threadpool_info
    blas = [(i.get("internal_api"), i.get("version"), i.get("architecture"), i.get("num_threads")) for i in threadpool_info()]
except Exception as e:  # threadpoolctl missing: still measure
    blas = [f"threadpoolctl unavailable: {e}"]

def median(f, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    ts.sort(); return ts[len(ts) // 2]

rng = np.random.default_rng(0)
rows = []
for n in (256, 512, 1024, 2048):
    a = rng.standard_normal((n, n), dtype=np.float32); b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    reps = {256: 200, 512: 50, 1024: 10, 2048: 5}[n]
    t = median(lambda: a @ b, reps)
    rows.append({"n": n, "gflops": 2 * n ** 3 / t / 1e9})
x = np.ones(64 * 1024 * 1024, dtype=np.float32); y = np.empty_like(x)
t = median(lambda: np.copyto(y, x), 5)
print(json.dumps({"peer": "numpy " + np.__version__, "blas": blas,
                  "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
                  "sgemm": rows, "memcpy_gbps": 2 * x.nbytes / t / 1e9}))
