#!/usr/bin/env python3
"""Writes a Hugging Face Llama folder from a Llama GGUF file, outside RLX.

Used to test RLX's Hugging Face path (`config.json` + safetensors + `tokenizer.json`) on
real weights when no model hub is reachable: the SmolLM2 GGUF's tensors are dequantized by
the `gguf` Python package (llama.cpp's own reader), Q/K rows are put back in Hugging Face's
"rotate half" order (the inverse of llama.cpp's converter permutation), and the embedded
GPT-2 BPE vocab/merges become a `tokenizer.json`. Greedy continuations from this folder must
then equal the numpy reference of the GGUF (crates/rlx-gguf/tests/fixtures/smollm2_greedy.json),
since the weights are the same values.

    python3 scripts/ref/gguf_to_hf.py models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
        models/smollm2-hf [--dtype f32|bf16]

Needs numpy and gguf (`pip install gguf`). The safetensors file is written by hand (the
format is an 8-byte length, a JSON header, then the bytes), so no other package is needed.
"""
import argparse
import json
import os
import struct

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    parts = [f.parts[i] for i in f.data]
    if f.types and f.types[0].name == "STRING":
        return bytes(parts[0]).decode()
    if f.types and f.types[0].name == "ARRAY":
        if f.types[-1].name == "STRING":
            return [bytes(p).decode() for p in parts]
        return [p.tolist()[0] for p in parts]
    return parts[0].tolist()[0]


def unpermute(w, n_head):
    """GGUF rows (per head [hd/2, 2]) back to Hugging Face's (per head [2, hd/2])."""
    rows, k = w.shape
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, k).swapaxes(1, 2).reshape(rows, k)


def to_bf16_bits(a):
    """float32 -> bfloat16 bit patterns, round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = u + 0x7FFF + ((u >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


def save_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name, a in tensors:
        if dtype == "bf16" and a.ndim == 2:
            data, st = to_bf16_bits(a).tobytes(), "BF16"
        else:
            data, st = np.ascontiguousarray(a, dtype="<f4").tobytes(), "F32"
        header[name] = {"dtype": st, "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".partial", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".partial", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    a = ap.parse_args()
    src, dst, dtype = a.gguf, a.out, a.dtype
    r = GGUFReader(src)
    assert field(r, "general.architecture") == "llama", "not a llama GGUF"
    heads = field(r, "llama.attention.head_count")
    kv_heads = field(r, "llama.attention.head_count_kv", heads)
    hidden = field(r, "llama.embedding_length")
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": field(r, "llama.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": field(r, "llama.feed_forward_length"),
        "vocab_size": field(r, "llama.vocab_size"),
        "rms_norm_eps": field(r, "llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": field(r, "llama.rope.freq_base", 10000.0),
        "max_position_embeddings": field(r, "llama.context_length", 2048),
        "hidden_act": "silu",
        "tie_word_embeddings": not any(t.name == "output.weight" for t in r.tensors),
        "bos_token_id": field(r, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(r, "tokenizer.ggml.eos_token_id"),
        "torch_dtype": "bfloat16" if dtype == "bf16" else "float32",
    }
    names = {
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
    }
    tensors = []
    for t in r.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)]) if w.ndim != len(t.shape) else w
        if t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output.weight":
            name = "lm_head.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        elif t.name.startswith("blk."):
            _, layer, kind, _ = t.name.split(".")
            name = f"model.layers.{layer}.{names[kind]}.weight"
            if kind == "attn_q":
                w = unpermute(w, heads)
            elif kind == "attn_k":
                w = unpermute(w, kv_heads)
        else:
            continue
        tensors.append((name, w))
    tensors.sort(key=lambda x: x[0])
    os.makedirs(dst, exist_ok=True)
    save_safetensors(os.path.join(dst, "model.safetensors"), tensors, dtype)

    tokens = field(r, "tokenizer.ggml.tokens")
    merges = field(r, "tokenizer.ggml.merges")
    types = field(r, "tokenizer.ggml.token_type", [1] * len(tokens))
    assert field(r, "tokenizer.ggml.model") == "gpt2", "only GPT-2 BPE vocabularies"
    pre = field(r, "tokenizer.ggml.pre", "default")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    pieces = [byte_level]
    if pre in ("smollm", "starcoder", "refact", "codeshell"):
        pieces = [{"type": "Digits", "individual_digits": True}, byte_level]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, (s, ty) in enumerate(zip(tokens, types)) if ty in (3, 4)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pieces},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {s: i for i, s in enumerate(tokens)}, "merges": merges},
    }
    with open(os.path.join(dst, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    bos, eos = cfg["bos_token_id"], cfg["eos_token_id"]
    tc = {
        "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token", False)),
        "bos_token": tokens[bos] if bos is not None else None,
        "eos_token": tokens[eos] if eos is not None else None,
        "chat_template": field(r, "tokenizer.chat_template"),
    }
    with open(os.path.join(dst, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, ensure_ascii=False, indent=1)
    with open(os.path.join(dst, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos}, f, indent=1)
    # config.json last: its presence marks the folder complete
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"{dst}: {len(tensors)} tensors ({dtype}), vocab {len(tokens)}")


if __name__ == "__main__":
    main()
