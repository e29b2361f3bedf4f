#!/usr/bin/env python3
"""PyTorch peer for crates/rlx-cuda/examples/bench_encoder.rs and bench_micro.rs, measured in
the same command on the same GPU.

Encoder: the same BERT shapes (hidden 384, 6 layers, 12 heads, FFN 1536, seq 128, fp16) in
eager mode, torch.compile (default and reduce-overhead) and eager captured in a CUDA graph;
median / p90 of >= 100 runs after warm-up, timed with CUDA events. With --weights DIR (written
by `bench_encoder --dump DIR`) it loads RLX's random weights and input and reports the relative
L2 difference between PyTorch's and RLX's batch-1 outputs.

Micro: --gemm runs torch.matmul at 4096^3 and 8192^3 in f16 and bf16 (TFLOP/s); --copy
measures device-to-device copy bandwidth over 1 GiB (read + write counted).
"""
import argparse
import os
import statistics

import numpy as np
import torch
import torch.nn.functional as F

H, L, NH, FFN, S = 384, 6, 12, 1536, 128


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))]


def load_weights(d):
    w = {}
    for line in open(os.path.join(d, "manifest.txt")):
        name, dtype, dims = line.split()
        shape = [int(x) for x in dims.split(",")]
        assert dtype == "f16", dtype
        arr = np.fromfile(os.path.join(d, name + ".bin"), dtype=np.float16).reshape(shape)
        w[name] = torch.from_numpy(arr).cuda()
    return w


def random_weights():
    g = torch.Generator(device="cuda").manual_seed(0)
    w = {}
    def r(name, shape, scale, offset=0.0):
        w[name] = ((torch.rand(shape, generator=g, device="cuda") * 2 - 1) * scale + offset).half()
    for l in range(L):
        for p, (k, n) in {"q": (H, H), "k": (H, H), "v": (H, H), "o": (H, H), "ffn1": (H, FFN), "ffn2": (FFN, H)}.items():
            r(f"l{l}.{p}.w", (k, n), H ** -0.5)
            r(f"l{l}.{p}.b", (n,), 0.02)
        for ln in ("ln1", "ln2"):
            r(f"l{l}.{ln}.g", (H,), 0.1, 1.0)
            r(f"l{l}.{ln}.b", (H,), 0.02)
    return w


def encoder(w, x):
    b = x.shape[0]
    hd = H // NH
    for l in range(L):
        p = lambda n, t: t @ w[f"l{l}.{n}.w"] + w[f"l{l}.{n}.b"]
        heads = lambda t: t.view(b, S, NH, hd).transpose(1, 2)
        q, k, v = heads(p("q", x)), heads(p("k", x)), heads(p("v", x))
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, S, H)
        h = F.layer_norm(p("o", a) + x, (H,), w[f"l{l}.ln1.g"], w[f"l{l}.ln1.b"], 1e-12)
        f = p("ffn2", F.gelu(p("ffn1", h)))
        x = F.layer_norm(f + h, (H,), w[f"l{l}.ln2.g"], w[f"l{l}.ln2.b"], 1e-12)
    return x


def bench_encoder(args):
    w = load_weights(args.weights) if args.weights else random_weights()
    if args.weights:
        inp = np.fromfile(os.path.join(args.weights, "input.bin"), dtype=np.float16).reshape(1, S, H)
        ref = np.fromfile(os.path.join(args.weights, "rlx_output.bin"), dtype=np.float16).reshape(1, S, H)
        with torch.no_grad():
            out = encoder(w, torch.from_numpy(inp).cuda()).float().cpu().numpy()
        ref = ref.astype(np.float32)
        err = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)
        print(f"encoder parity batch=1 fp16 rel_l2(torch, rlx)={err:.3e}")
    for batch in [int(b) for b in args.batches.split(",")]:
        x = torch.randn(batch, S, H, device="cuda").half()
        with torch.no_grad():
            modes = [("eager", lambda: encoder(w, x))]
            if not args.no_compile:
                c1 = torch.compile(lambda t: encoder(w, t))
                c2 = torch.compile(lambda t: encoder(w, t), mode="reduce-overhead")
                modes += [("torch.compile", lambda: c1(x)), ("torch.compile reduce-overhead", lambda: c2(x))]
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    encoder(w, x)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                encoder(w, x)
            modes.append(("eager CUDA graph", graph.replay))
            for name, fn in modes:
                try:
                    med, p90 = timed(fn, args.iters, args.warmup)
                    print(f"torch encoder batch={batch} fp16 mode={name!r} median_ms={med:.4f} p90_ms={p90:.4f}")
                except Exception as e:  # a mode that fails is reported, not fatal
                    print(f"torch encoder batch={batch} mode={name!r} FAILED: {e}")


def bench_gemm(args):
    for n in (4096, 8192):
        for dt in (torch.float16, torch.bfloat16):
            a = torch.randn(n, n, device="cuda", dtype=dt)
            b = torch.randn(n, n, device="cuda", dtype=dt)
            med, _ = timed(lambda: torch.matmul(a, b), 50, 10)
            print(f"torch gemm n={n} dtype={str(dt).split('.')[1]} median_ms={med:.4f} tflops={2 * n ** 3 / med / 1e9:.1f}")


def bench_copy(args):
    n = 1 << 28
    a = torch.randn(n, device="cuda")
    b = torch.empty_like(a)
    med, _ = timed(lambda: b.copy_(a), 50, 10)
    print(f"torch copy 1GiB median_ms={med:.4f} gbps_rw={2 * 4 * n / med / 1e6:.1f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,32,256")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--weights", default="")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--gemm", action="store_true")
    ap.add_argument("--copy", action="store_true")
    ap.add_argument("--no-encoder", action="store_true")
    args = ap.parse_args()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    if not args.no_encoder:
        bench_encoder(args)
    if args.gemm:
        bench_gemm(args)
    if args.copy:
        bench_copy(args)
