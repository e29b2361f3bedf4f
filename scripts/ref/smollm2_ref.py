#!/usr/bin/env python3
"""Independent reference for RLX's GGUF/Llama path: SmolLM2-135M-Instruct (GGUF Q4_1).

Weights are dequantized by the `gguf` Python package (llama.cpp's own reader); the forward
pass is plain numpy (float32); the tokenizer is a from-scratch GPT-2 byte-level BPE over the
vocab and merges embedded in the file. Nothing here uses RLX.

Writes crates/rlx-gguf/tests/fixtures/smollm2_greedy.json: for each prompt, the prompt ids
and the greedy 32-token continuation ids, plus checksums of a few dequantized tensors.

Regenerate (needs `pip install gguf numpy regex` and the model file):
    python3 scripts/ref/smollm2_ref.py models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
        crates/rlx-gguf/tests/fixtures/smollm2_greedy.json
Also writes the quantization fixture (random blocks of every format, dequantized by gguf):
    python3 scripts/ref/smollm2_ref.py --quant crates/rlx-gguf/tests/fixtures/quant_ref.json
"""
import json
import sys

import numpy as np

PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a",
    "1 + 1 = 2, 2 + 2 = 4, 3 + 3 =",
]
N_NEW = 32


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


class Bpe:
    """GPT-2 byte-level BPE with SmolLM's pre-tokenizer (digits split one by one)."""

    def __init__(self, tokens, merges):
        import regex
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.tokens = tokens
        self.ranks = {tuple(m.split(" ", 1)): i for i, m in enumerate(merges)}
        self.b2u = bytes_to_unicode()
        self.u2b = {v: k for k, v in self.b2u.items()}
        self.pat = regex.compile(
            r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
        self.digits = regex.compile(r"\p{N}|[^\p{N}]+")

    def bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            best = None
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]
        return parts

    def encode(self, text):
        out = []
        for chunk in self.digits.findall(text):
            for piece in self.pat.findall(chunk):
                u = "".join(self.b2u[b] for b in piece.encode("utf-8"))
                out.extend(self.ids[p] for p in self.bpe(u))
        return out

    def decode(self, ids):
        s = "".join(self.tokens[i] for i in ids)
        return bytes(self.u2b[c] for c in s).decode("utf-8", errors="replace")


def load(path):
    from gguf import GGUFReader
    from gguf.quants import dequantize
    r = GGUFReader(path)

    def meta(k):
        f = r.fields[k]
        v = f.parts[f.data[0]]
        return v.tolist()[0] if len(v) == 1 else v

    def strings(k):
        f = r.fields[k]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    w = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        w[t.name] = a.reshape([int(d) for d in reversed(t.shape.tolist())])
    cfg = dict(
        n_layer=meta("llama.block_count"),
        n_embd=meta("llama.embedding_length"),
        n_head=meta("llama.attention.head_count"),
        n_kv=meta("llama.attention.head_count_kv"),
        eps=float(meta("llama.attention.layer_norm_rms_epsilon")),
        base=float(meta("llama.rope.freq_base")),
    )
    tok = Bpe(strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges"))
    return cfg, w, tok


def rms(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def rope(x, pos, base):
    # x [T, H, D]; llama.cpp "normal" rope: adjacent pairs (GGUF stores Q/K permuted for it)
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.outer(pos, inv)  # [T, D/2]
    c = np.cos(ang)[:, None, :].astype(np.float32)
    s = np.sin(ang)[:, None, :].astype(np.float32)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def forward(cfg, w, ids, cache, start):
    """Runs tokens `ids` at positions start.. with the per-layer KV cache; returns logits."""
    nh, nkv, d = cfg["n_head"], cfg["n_kv"], cfg["n_embd"]
    hd = d // nh
    T = len(ids)
    pos = np.arange(start, start + T)
    x = w["token_embd.weight"][ids]
    for l in range(cfg["n_layer"]):
        p = f"blk.{l}."
        h = rms(x, w[p + "attn_norm.weight"], cfg["eps"])
        q = (h @ w[p + "attn_q.weight"].T).reshape(T, nh, hd)
        k = (h @ w[p + "attn_k.weight"].T).reshape(T, nkv, hd)
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, nkv, hd)
        q, k = rope(q, pos, cfg["base"]), rope(k, pos, cfg["base"])
        ck, cv = cache[l]
        ck = np.concatenate([ck, k]) if ck is not None else k
        cv = np.concatenate([cv, v]) if cv is not None else v
        cache[l] = (ck, cv)
        S = ck.shape[0]
        g = nh // nkv
        att = np.empty((T, nh, hd), np.float32)
        mask = np.where(np.arange(S)[None, :] <= pos[:, None], 0.0, -np.inf)
        for hh in range(nh):
            kk, vv = ck[:, hh // g], cv[:, hh // g]
            s = q[:, hh] @ kk.T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            att[:, hh] = s @ vv
        x = x + att.reshape(T, d) @ w[p + "attn_output.weight"].T
        h = rms(x, w[p + "ffn_norm.weight"], cfg["eps"])
        gt = h @ w[p + "ffn_gate.weight"].T
        up = h @ w[p + "ffn_up.weight"].T
        x = x + (gt / (1 + np.exp(-gt)) * up) @ w[p + "ffn_down.weight"].T
    x = rms(x, w["output_norm.weight"], cfg["eps"])
    head = w.get("output.weight", w["token_embd.weight"])
    return x @ head.T


def greedy(cfg, w, ids, n):
    cache = [(None, None)] * cfg["n_layer"]
    logits = forward(cfg, w, ids, cache, 0)
    out = []
    pos = len(ids)
    for _ in range(n):
        nxt = int(np.argmax(logits[-1]))
        out.append(nxt)
        logits = forward(cfg, w, [nxt], cache, pos)
        pos += 1
    return out


def quant_fixture(path):
    from gguf.constants import GGMLQuantizationType as Q
    from gguf.quants import dequantize
    rng = np.random.default_rng(7)
    spec = {  # name: (type, block bytes, f16 scale offsets)
        "f32": (Q.F32, 4, []), "f16": (Q.F16, 2, []), "bf16": (Q.BF16, 2, []),
        "q8_0": (Q.Q8_0, 34, [0]), "q4_0": (Q.Q4_0, 18, [0]), "q4_1": (Q.Q4_1, 20, [0, 2]),
        "q4_k": (Q.Q4_K, 144, [0, 2]), "q5_k": (Q.Q5_K, 176, [0, 2]),
        "q6_k": (Q.Q6_K, 210, [208]),
        "q5_0": (Q.Q5_0, 22, [0]), "q5_1": (Q.Q5_1, 24, [0, 2]),
        "q2_k": (Q.Q2_K, 84, [80, 82]), "q3_k": (Q.Q3_K, 110, [108]),
    }
    out = {}
    for name, (qt, bb, scales) in spec.items():
        nblk = 512 if bb <= 4 else 3
        raw = rng.integers(0, 256, size=(nblk, bb), dtype=np.uint8)
        for s in scales:
            raw[:, s:s + 2] = np.frombuffer(
                (rng.standard_normal(nblk) * 0.05).astype(np.float16).tobytes(),
                np.uint8).reshape(nblk, 2)
        if name == "f32":
            raw = np.frombuffer(rng.standard_normal(nblk).astype(np.float32).tobytes(),
                                np.uint8).reshape(nblk, 4)
        elif name == "f16":
            raw = np.frombuffer(rng.standard_normal(nblk).astype(np.float16).tobytes(),
                                np.uint8).reshape(nblk, 2)
        elif name == "bf16":
            f = rng.standard_normal(nblk).astype(np.float32).view(np.uint32) >> 16
            raw = np.frombuffer(f.astype(np.uint16).tobytes(), np.uint8).reshape(nblk, 2)
        flat = raw.reshape(-1)
        vals = dequantize(flat, qt).astype(np.float32).reshape(-1)
        out[name] = {"bytes": flat.tobytes().hex(), "values": [float(v) for v in vals]}
    # the other way: f32 values quantized by gguf (GGML's reference rounding), for the
    # formats the package quantizes
    from gguf.quants import quantize
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((4, 64)) * np.array([[0.02], [1.0], [30.0], [1e-3]])).astype(np.float32)
    x[1, 5] = 0.0
    x[3] += 0.004  # a row of one sign
    out["quantize"] = {"values": [float(v) for v in x.reshape(-1)]}
    for name, qt in {"q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1, "q5_0": Q.Q5_0,
                     "q5_1": Q.Q5_1}.items():
        out["quantize"][name] = quantize(x, qt).tobytes().hex()
    with open(path, "w") as f:
        json.dump(out, f)
    print(f"wrote {path}")


def main():
    if sys.argv[1] == "--quant":
        quant_fixture(sys.argv[2])
        return
    model, out_path = sys.argv[1], sys.argv[2]
    cfg, w, tok = load(model)
    checks = {}
    for name in ["token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight",
                 "output_norm.weight"]:
        a = w[name].astype(np.float64)
        checks[name] = {"sum": float(a.sum()), "abs_sum": float(np.abs(a).sum()),
                        "first": [float(v) for v in a.reshape(-1)[:8]]}
    cases = []
    for p in PROMPTS:
        ids = tok.encode(p)
        gen = greedy(cfg, w, ids, N_NEW)
        text = tok.decode(gen)
        print(repr(p), ids, "->", repr(text))
        cases.append({"prompt": p, "prompt_ids": ids, "greedy_ids": gen, "text": text})
    with open(out_path, "w") as f:
        json.dump({"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "new_tokens": N_NEW,
                   "cases": cases, "tensors": checks}, f, indent=1)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
