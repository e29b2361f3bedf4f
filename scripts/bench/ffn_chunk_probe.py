"""Probe for issue 5: does running the encoder's FFN (x @ W1 + b1 -> exact GELU -> @ W2 + b2)
in row chunks, reusing one L2-sized intermediate buffer, beat the whole-batch form on this
GPU? PyTorch ops in CUDA graphs, fp16, MiniLM shapes (hidden 384, FFN 1536, 128 tokens).
Prints the median over CUDA-graph replays for each batch and chunk count.

  python3 scripts/bench/ffn_chunk_probe.py [--batches 32,256] [--chunks 1,2,4,8]
"""
import argparse

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="32,256")
    ap.add_argument("--chunks", default="1,2,4,8")
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    torch.manual_seed(0)
    dev, dt = "cuda", torch.float16
    h, f, seq = 384, 1536, 128
    w1 = torch.randn(h, f, device=dev, dtype=dt) / h**0.5
    b1 = torch.randn(f, device=dev, dtype=dt) * 0.02
    w2 = torch.randn(f, h, device=dev, dtype=dt) / f**0.5
    b2 = torch.randn(h, device=dev, dtype=dt) * 0.02
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for batch in [int(b) for b in args.batches.split(",")]:
        rows = batch * seq
        x = torch.randn(rows, h, device=dev, dtype=dt)
        out = torch.empty(rows, h, device=dev, dtype=dt)
        want = F.gelu(x @ w1 + b1) @ w2 + b2
        for chunks in [int(c) for c in args.chunks.split(",")]:
            if rows % chunks:
                continue
            step = rows // chunks
            mid = torch.empty(step, f, device=dev, dtype=dt)  # one buffer, reused per chunk

            def ffn():
                for c in range(chunks):
                    xs = x[c * step:(c + 1) * step]
                    torch.addmm(b1, xs, w1, out=mid)
                    torch.ops.aten.gelu_(mid)  # exact GELU, in place
                    torch.addmm(b2, mid, w2, out=out[c * step:(c + 1) * step])

            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    ffn()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                ffn()
            for _ in range(20):
                g.replay()
            torch.cuda.synchronize()
            times = []
            for _ in range(args.iters):
                a, b = torch.cuda.Event(True), torch.cuda.Event(True)
                a.record()
                g.replay()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
            times.sort()
            err = ((out.float() - want.float()).norm() / want.float().norm()).item()
            mb = step * f * 2 / 2**20
            print(
                f"batch {batch:4d} chunks {chunks}: median {times[len(times) // 2]:.4f} ms "
                f"(intermediate {mb:.1f} MiB per chunk, rel err {err:.1e})"
            )


if __name__ == "__main__":
    main()
