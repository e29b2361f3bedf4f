#!/usr/bin/env python3
"""Independent reference for BERT sentence embeddings (all-MiniLM-L6-v2): a float64 numpy
forward pass straight from model.safetensors and config.json, no RLX code involved.

Usage: minilm_ref.py REQUEST.json
  REQUEST.json: {"model_dir": DIR, "texts": [...], "input_ids": [[...], ...], "max_len": N}
  input_ids are the unpadded ids RLX's tokenizer produced, one list per text.
Prints one JSON object:
  {"embeddings": [[...]], "tokenizer": "checked" | "unavailable", "ids_match": bool | null,
   "python_ids": [[...]] | null}
Each text is run alone and unpadded (mean pooling over its tokens, then L2 normalisation, as
sentence-transformers' Pooling + Normalize), so the result is what a padded, masked batch
must reproduce. When the Python `tokenizers` package is installed, the texts are also
tokenized here from tokenizer.json (padding off, truncation at max_len) and compared with the
ids RLX passed.
"""
import json
import math
import struct
import sys

import numpy as np

try:
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - exercised only without scipy
    _erf = np.vectorize(math.erf, otypes=[np.float64])


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        buf = f.read()
    header.pop("__metadata__", None)
    dtypes = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8"}
    out = {}
    for name, v in header.items():
        a, b = v["data_offsets"]
        if v["dtype"] not in dtypes:
            continue
        arr = np.frombuffer(buf[a:b], dtype=dtypes[v["dtype"]]).reshape(v["shape"])
        out[name] = arr.astype(np.float64) if v["dtype"] != "I64" else arr
    return out


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def act(name, x):
    if name == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "relu":
        return np.maximum(x, 0.0)
    if name in ("silu", "swish"):
        return x / (1.0 + np.exp(-x))
    raise SystemExit(f"unsupported hidden_act {name}")


def embed(W, cfg, ids, p):
    H, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    DH = H // NH
    eps = cfg.get("layer_norm_eps", 1e-12)
    n = len(ids)
    x = W[p + "embeddings.word_embeddings.weight"][np.asarray(ids)]
    x = x + W[p + "embeddings.position_embeddings.weight"][:n]
    x = x + W[p + "embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, W[p + "embeddings.LayerNorm.weight"], W[p + "embeddings.LayerNorm.bias"], eps)
    for l in range(cfg["num_hidden_layers"]):
        q_ = f"{p}encoder.layer.{l}."

        def lin(name, v):
            return v @ W[q_ + name + ".weight"].T + W[q_ + name + ".bias"]

        q = lin("attention.self.query", x).reshape(n, NH, DH).transpose(1, 0, 2)
        k = lin("attention.self.key", x).reshape(n, NH, DH).transpose(1, 0, 2)
        v = lin("attention.self.value", x).reshape(n, NH, DH).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(DH)
        s = np.exp(s - s.max(-1, keepdims=True))
        s = s / s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, H)
        x = layer_norm(lin("attention.output.dense", ctx) + x,
                       W[q_ + "attention.output.LayerNorm.weight"],
                       W[q_ + "attention.output.LayerNorm.bias"], eps)
        h = act(cfg.get("hidden_act", "gelu"), lin("intermediate.dense", x))
        x = layer_norm(lin("output.dense", h) + x,
                       W[q_ + "output.LayerNorm.weight"], W[q_ + "output.LayerNorm.bias"], eps)
    mean = x.mean(0)
    return mean / max(np.linalg.norm(mean), 1e-12)


def python_ids(model_dir, texts, max_len):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    tok = Tokenizer.from_file(model_dir + "/tokenizer.json")
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)
    return [e.ids for e in tok.encode_batch(texts)]


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    req = json.load(open(sys.argv[1]))
    d = req["model_dir"].rstrip("/")
    W = load_safetensors(d + "/model.safetensors")
    cfg = json.load(open(d + "/config.json"))
    p = "bert." if "bert.embeddings.word_embeddings.weight" in W else ""
    embs = [embed(W, cfg, ids, p).tolist() for ids in req["input_ids"]]
    py = python_ids(d, req.get("texts", []), req.get("max_len", 512)) if req.get("texts") else None
    print(json.dumps({
        "embeddings": embs,
        "tokenizer": "checked" if py is not None else "unavailable",
        "ids_match": (py == req["input_ids"]) if py is not None else None,
        "python_ids": py,
    }))


if __name__ == "__main__":
    main()
