#!/usr/bin/env python3
"""Peers for the MiniLM CPU benchmark: ONNX Runtime (2 intra-op threads, all graph
optimizations) and OpenVINO (f32 inference precision, or bf16 for openvino-bf16; 2
threads, latency hint) on the fp32
ONNX built by ../shared/bench/build_minilm_onnx.py from the same safetensors.

Usage: minilm_peers.py MODEL.onnx BATCH SEQ WARMUP ITERS [ort|openvino|openvino-bf16 ...]
Prints one JSON object per peer: {"peer", "batch", "seq", "median_ms", "p90_ms", "min_ms",
"iters", "version", "config"}.
"""
import json
import math
import sys
import time

import numpy as np


def stats(times):
    t = sorted(times)
    q = lambda p: t[min(len(t), max(1, math.ceil(len(t) * p))) - 1]
    return {"median_ms": q(0.5), "p90_ms": q(0.9), "min_ms": t[0], "iters": len(t)}


def timed(run, warmup, iters):
    for _ in range(warmup):
        run()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    return stats(times)


def inputs(batch, seq):
    rng = np.random.default_rng(1)
    ids = rng.integers(1000, 30000, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask}


def ort(path, batch, seq, warmup, iters):
    import onnxruntime as rt
    so = rt.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = inputs(batch, seq)
    r = timed(lambda: sess.run(None, feed), warmup, iters)
    r.update(peer="onnxruntime", version=rt.__version__,
             config="CPUExecutionProvider, intra_op_num_threads=2, ORT_ENABLE_ALL")
    return r


def openvino(path, batch, seq, warmup, iters, precision="f32"):
    import openvino as ov
    core = ov.Core()
    model = core.read_model(path)
    model.reshape({"input_ids": [batch, seq], "attention_mask": [batch, seq]})
    cfg = {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": 2,
           "PERFORMANCE_HINT": "LATENCY"}
    compiled = core.compile_model(model, "CPU", cfg)
    req = compiled.create_infer_request()
    feed = inputs(batch, seq)
    r = timed(lambda: req.infer(feed), warmup, iters)
    r.update(peer="openvino" if precision == "f32" else f"openvino-{precision}",
             version=ov.__version__,
             config=f"CPU, INFERENCE_PRECISION_HINT={precision}, INFERENCE_NUM_THREADS=2, LATENCY, static shape")
    return r


def openvino_bf16(path, batch, seq, warmup, iters):
    return openvino(path, batch, seq, warmup, iters, "bf16")


def main():
    if len(sys.argv) < 6:
        raise SystemExit(__doc__)
    path, batch, seq, warmup, iters = sys.argv[1], *map(int, sys.argv[2:6])
    peers = sys.argv[6:] or ["ort", "openvino"]
    for p in peers:
        fn = {"ort": ort, "openvino": openvino, "openvino-bf16": openvino_bf16}[p]
        try:
            r = fn(path, batch, seq, warmup, iters)
        except ImportError as e:
            r = {"peer": p, "error": f"not installed: {e}"}
        r.update(batch=batch, seq=seq)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
