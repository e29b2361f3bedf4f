#!/usr/bin/env python3
"""What a run costs from Python on top of the same run from Rust (BENCHMARKS.md, "Python
overhead"): a one-Add ONNX model (f32[1, 4] + f32[1, 4]) on the CPU, median of many runs.

Python: rlx.InferenceSession(...).run(None, feeds) with numpy feeds.
Rust: the same model through rlx_onnx::runtime::dynamic, as the session runs it
(crates/rlx-onnx/examples/run_latency.rs). onnxruntime's run is timed as a reference.

Usage: scripts/bench/python-overhead.py RUST_EXAMPLE_BINARY [ITERS]
  (build it: cargo build -p rlx-onnx --features runtime --example run_latency)
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python", "tests"))
import models  # noqa: E402

import onnx  # noqa: E402

import rlx  # noqa: E402


def median_us(fn, iters):
    for _ in range(min(iters, 1000)):
        fn()
    times = []
    clock = time.perf_counter_ns
    for _ in range(iters):
        t = clock()
        fn()
        times.append(clock() - t)
    return statistics.median(times) / 1e3


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    binary = sys.argv[1]
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "add.onnx")
        onnx.save(models.add(), path)
        feeds = {"a": np.ones((1, 4), np.float32), "b": np.ones((1, 4), np.float32)}
        sess = rlx.InferenceSession(path, device="cpu")
        py = median_us(lambda: sess.run(None, feeds), iters)
        rust = float(subprocess.check_output([binary, path, "1x4", str(iters)], text=True))
        ort_line = ""
        try:
            import onnxruntime as ort

            o = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            ort_line = f", onnxruntime {median_us(lambda: o.run(None, feeds), iters):.2f} us"
        except ImportError:
            pass
    print(f"rlx from Rust {rust:.2f} us, rlx from Python {py:.2f} us, "
          f"overhead {py - rust:.2f} us{ort_line} (median of {iters} runs)")


if __name__ == "__main__":
    main()
