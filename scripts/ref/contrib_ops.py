#!/usr/bin/env python3
"""Writes one small model per ONNX Runtime contrib op (com.microsoft) with random inputs and
onnxruntime's outputs, in the ONNX backend-test layout:
OUT/<case>/model.onnx, OUT/<case>/test_data_set_0/{input,output}_N.pb, and
OUT/<case>/kind.txt ("float": rel L2 <= 1e-4, "int": within one quantization step).
Usage: contrib_ops.py OUT_DIR. Needs numpy, onnx and onnxruntime (its CPU provider)."""
import math
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

MS = "com.microsoft"
rng = np.random.default_rng(24)
DT = {np.float32: TP.FLOAT, np.int32: TP.INT32, np.int64: TP.INT64, np.uint8: TP.UINT8,
      np.int8: TP.INT8, np.float16: TP.FLOAT16}


def f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def case(out_dir, name, op, inputs, inits, outputs, attrs=None, kind="float", extra_nodes=(),
         ref=None):
    """inputs: list of (name, array) fed at run time, or None for an omitted optional
    input; inits: dict of initializers; outputs: output names ("" for omitted). `ref`
    computes the outputs in numpy for ops onnxruntime has no CPU kernel for."""
    names, feeds, graph_inputs = [], {}, []
    for item in inputs:
        if item is None:
            names.append("")
            continue
        n, a = item
        names.append(n)
        if n in inits:
            continue
        feeds[n] = a
        graph_inputs.append(helper.make_tensor_value_info(n, DT[a.dtype.type], list(a.shape)))
    node = helper.make_node(op, names, outputs, domain=MS, name=name, **(attrs or {}))
    init = [numpy_helper.from_array(v, k) for k, v in inits.items() if k in names]
    outs = [o for o in outputs if o]
    graph = helper.make_graph(list(extra_nodes) + [node], name, graph_inputs,
                              [onnx.ValueInfoProto(name=o) for o in outs],
                              init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    try:
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        results = sess.run(outs, feeds)
    except ort.capi.onnxruntime_pybind11_state.NotImplemented:
        if ref is None:
            raise
        results = ref()
    # declare the outputs with the types onnxruntime computed
    del model.graph.output[:]
    for o, r in zip(outs, results):
        model.graph.output.append(helper.make_tensor_value_info(o, DT[r.dtype.type], list(r.shape)))
    d = os.path.join(out_dir, name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for i, (n, a) in enumerate(feeds.items()):
        with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    for i, (n, a) in enumerate(zip(outs, results)):
        with open(os.path.join(data, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    with open(os.path.join(d, "kind.txt"), "w") as f:
        f.write(kind)


def activations(o):
    x = f32(2, 3, 8, lo=-3, hi=3)
    b = f32(8)
    case(o, "gelu", "Gelu", [("x", x)], {}, ["y"])
    case(o, "bias_gelu", "BiasGelu", [("x", x), ("b", b)], {"b": b}, ["y"])
    case(o, "fast_gelu_bias", "FastGelu", [("x", x), ("b", b)], {"b": b}, ["y"])
    case(o, "fast_gelu", "FastGelu", [("x", x)], {}, ["y"])
    case(o, "quick_gelu", "QuickGelu", [("x", x)], {}, ["y"])
    case(o, "quick_gelu_alpha", "QuickGelu", [("x", x)], {}, ["y"], {"alpha": 1.3})
    skip = f32(2, 3, 8)
    case(o, "bias_add", "BiasAdd", [("x", x), ("b", b), ("skip", skip)], {"b": b}, ["y"],
         ref=lambda: [x + b + skip])
    xs = f32(2, 4, 16, lo=-2, hi=2)
    bs = f32(16)
    def split_gelu():
        y = (xs + bs).astype(np.float64)
        left, right = y[..., :8], y[..., 8:]
        erf = np.vectorize(math.erf)
        return [(left * 0.5 * right * (1 + erf(right / math.sqrt(2)))).astype(np.float32)]

    case(o, "bias_split_gelu", "BiasSplitGelu", [("x", xs), ("b", bs)], {"b": bs}, ["y"],
         ref=split_gelu)


def norms(o):
    x, skip = f32(2, 3, 16), f32(2, 3, 16)
    g, be, bi = f32(16, lo=0.5, hi=1.5), f32(16), f32(16)
    w = {"g": g, "be": be, "bi": bi}
    case(o, "skip_layer_norm", "SkipLayerNormalization",
         [("x", x), ("skip", skip), ("g", g), ("be", be), ("bi", bi)], w, ["y"],
         {"epsilon": 1e-5})
    case(o, "skip_layer_norm_outputs", "SkipLayerNormalization",
         [("x", x), ("skip", skip), ("g", g), ("be", be), ("bi", bi)], w,
         ["y", "mean", "inv_std", "sum"])
    case(o, "skip_layer_norm_nobeta", "SkipLayerNormalization",
         [("x", x), ("skip", skip), ("g", g)], w, ["y", "", "", "sum"])
    case(o, "skip_simplified_layer_norm", "SkipSimplifiedLayerNormalization",
         [("x", x), ("skip", skip), ("g", g), ("bi", bi)], w, ["y", "", "", "sum"],
         {"epsilon": 1e-6})
    ids = rng.integers(0, 30, size=(2, 5)).astype(np.int32)
    seg = rng.integers(0, 2, size=(2, 5)).astype(np.int32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=np.int32)
    e = {"word": f32(30, 16), "pos": f32(16, 16), "segt": f32(2, 16), "g": g, "be": be}
    case(o, "embed_layer_norm", "EmbedLayerNormalization",
         [("ids", ids), ("seg", seg), ("word", e["word"]), ("pos", e["pos"]),
          ("segt", e["segt"]), ("g", g), ("be", be), ("mask", mask)], e,
         ["y", "mask_index", "sum"], kind="float")
    e2 = {k: e[k] for k in ("word", "pos", "g", "be")}
    case(o, "embed_layer_norm_noseg", "EmbedLayerNormalization",
         [("ids", ids), None, ("word", e["word"]), ("pos", e["pos"]), None, ("g", g),
          ("be", be)], e2, ["y", "mask_index"], {"epsilon": 1e-5})


def attentions(o):
    x = f32(2, 4, 16)
    w, b = f32(16, 48, lo=-0.5, hi=0.5), f32(48)
    raw = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=np.int32)
    wi = {"w": w, "b": b}
    case(o, "attention_raw_mask", "Attention", [("x", x), ("w", w), ("b", b), ("m", raw)], wi,
         ["y"], {"num_heads": 2})
    case(o, "attention_causal", "Attention", [("x", x), ("w", w), ("b", b)], wi, ["y"],
         {"num_heads": 4, "unidirectional": 1})
    end = np.array([2, 4], dtype=np.int32)
    case(o, "attention_key_index", "Attention", [("x", x), ("w", w), ("b", b), ("m", end)], wi,
         ["y"], {"num_heads": 2, "scale": 0.3})
    past = f32(2, 2, 2, 3, 8)
    raw_past = np.ones((2, 7), dtype=np.int32)
    raw_past[0, 6] = 0
    case(o, "attention_past", "Attention",
         [("x", x), ("w", w), ("b", b), ("m", raw_past), ("past", past)], wi,
         ["y", "present"], {"num_heads": 2, "unidirectional": 1})
    w2 = f32(16, 40, lo=-0.5, hi=0.5)
    case(o, "attention_qkv_sizes", "Attention", [("x", x), ("w", w2)], {"w": w2}, ["y"],
         {"num_heads": 2, "qkv_hidden_sizes": [12, 12, 16]})
    q, k, v = f32(2, 3, 16), f32(2, 5, 16), f32(2, 5, 16)
    kpm = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=np.int32)
    case(o, "mha_bias_mask", "MultiHeadAttention",
         [("q", q), ("k", k), ("v", v), ("b", b), ("kpm", kpm)], {"b": b}, ["y"],
         {"num_heads": 2})
    ab = f32(2, 4, 3, 5)
    case(o, "mha_attention_bias", "MultiHeadAttention",
         [("q", q), ("k", k), ("v", v), None, None, ("ab", ab)], {}, ["y"],
         {"num_heads": 4, "scale": 0.25})
    pk, pv = f32(2, 2, 2, 8), f32(2, 2, 2, 8)
    q1, k1, v1 = f32(2, 1, 16), f32(2, 1, 16), f32(2, 1, 16)
    case(o, "mha_past", "MultiHeadAttention",
         [("q", q1), ("k", k1), ("v", v1), None, None, None, ("pk", pk), ("pv", pv)], {},
         ["y", "present_k", "present_v"], {"num_heads": 2})
    cos = np.cos(np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(4) / 4))).astype(np.float32)
    sin = np.sin(np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(4) / 4))).astype(np.float32)
    rot = {"cos": cos, "sin": sin}
    # GroupQueryAttention: 4 query heads, 2 KV heads of 16 (its rotary needs multiples of 16)
    gq, gk, gv = f32(2, 4, 64), f32(2, 4, 32), f32(2, 4, 32)
    seqlens = np.array([3, 3], dtype=np.int32)
    total = np.array([4], dtype=np.int32)
    case(o, "gqa_prompt", "GroupQueryAttention",
         [("q", gq), ("k", gk), ("v", gv), None, None, ("sl", seqlens), ("tot", total)], {},
         ["y", "pk", "pv"], {"num_heads": 4, "kv_num_heads": 2})
    ang = np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(8) / 8))
    c16, s16 = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    rot16 = {"c16": c16, "s16": s16}
    case(o, "gqa_rotary", "GroupQueryAttention",
         [("q", gq), ("k", gk), ("v", gv), None, None, ("sl", seqlens), ("tot", total),
          ("c16", c16), ("s16", s16)], rot16, ["y"],
         {"num_heads": 4, "kv_num_heads": 2, "do_rotary": 1})
    gpk, gpv = f32(2, 2, 3, 16), f32(2, 2, 3, 16)
    g1q, g1k, g1v = f32(2, 1, 64), f32(2, 1, 32), f32(2, 1, 32)
    case(o, "gqa_past_rotary", "GroupQueryAttention",
         [("q", g1q), ("k", g1k), ("v", g1v), ("gpk", gpk), ("gpv", gpv), ("sl", seqlens),
          ("tot", total), ("c16", c16), ("s16", s16)], rot16, ["y", "pk", "pv"],
         {"num_heads": 4, "kv_num_heads": 2, "do_rotary": 1, "rotary_interleaved": 1})
    packed = f32(2, 4, 128)
    case(o, "gqa_packed_window", "GroupQueryAttention",
         [("qkv", packed), None, None, None, None, ("sl", seqlens), ("tot", total)], {},
         ["y"], {"num_heads": 4, "kv_num_heads": 2, "local_window_size": 2})
    # RotaryEmbedding: x [B, S, hidden] with 2 heads of 8
    rx = f32(2, 3, 16)
    pos = np.array([[0, 1, 2], [4, 5, 6]], dtype=np.int64)
    case(o, "rotary", "RotaryEmbedding", [("x", rx), ("pos", pos), ("cos", cos), ("sin", sin)],
         rot, ["y"], {"num_heads": 2})
    case(o, "rotary_interleaved_offset", "RotaryEmbedding",
         [("x", rx), ("pos", np.array([3], dtype=np.int64)), ("cos", cos), ("sin", sin)], rot,
         ["y"], {"interleaved": 1})
    rx4 = f32(2, 2, 3, 12)
    case(o, "rotary_4d_partial", "RotaryEmbedding",
         [("x", rx4), ("pos", pos), ("cos", cos), ("sin", sin)], rot, ["y"],
         {"rotary_embedding_dim": 8, "num_heads": 2})


def q4(o, name, k, n, block, bits, zero_points, f16_scales):
    a = f32(3, k)
    n_blocks = (k + block - 1) // block
    levels = 1 << bits
    q = rng.integers(0, levels, size=(n, n_blocks * block)).astype(np.uint8)
    if bits == 4:
        packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    else:
        packed = q
    blob = block * bits // 8
    bmat = packed.reshape(n, n_blocks, blob)
    scales = rng.uniform(0.01, 0.1, size=(n * n_blocks,)).astype(np.float32)
    if f16_scales:
        scales = scales.astype(np.float16).astype(np.float32)
    inits = {"B": bmat, "scales": scales}
    ins = [("a", a), ("B", bmat), ("scales", scales)]
    if zero_points:
        per_row = (n_blocks * bits + 7) // 8
        zp = rng.integers(0, levels, size=(n, n_blocks)).astype(np.uint8)
        if bits == 4:
            zp = np.pad(zp, ((0, 0), (0, per_row * 2 - n_blocks)))
            zp = (zp[:, 0::2] | (zp[:, 1::2] << 4)).astype(np.uint8)
        inits["zp"] = zp.reshape(-1)
        ins.append(("zp", inits["zp"]))
    bias = f32(n)
    inits["bias"] = bias
    ins += [None] * (4 - len(ins)) + [None, ("bias", bias)]
    case(o, name, "MatMulNBits", ins, inits, ["y"],
         {"K": k, "N": n, "bits": bits, "block_size": block})


def products(o):
    a, b = f32(2, 3, 4), f32(2, 5, 4)
    case(o, "fused_matmul", "FusedMatMul", [("a", a), ("b", b)], {}, ["y"],
         {"transB": 1, "alpha": 0.5})
    at = f32(4, 3)
    b2 = f32(4, 6)
    case(o, "fused_matmul_trans_a", "FusedMatMul", [("a", at), ("b", b2)], {"b": b2}, ["y"],
         {"transA": 1})
    q4(o, "matmul_nbits_q4_0", 64, 8, 32, 4, False, True)
    q4(o, "matmul_nbits_zero_points", 64, 8, 32, 4, True, False)
    q4(o, "matmul_nbits_partial_block", 40, 6, 16, 4, True, False)
    q4(o, "matmul_nbits_8bit", 64, 8, 32, 8, False, True)
    x = f32(3, 16, lo=-2, hi=3)
    bq = rng.integers(-127, 128, size=(16, 8)).astype(np.int8)
    bs = rng.uniform(0.001, 0.01, size=(8,)).astype(np.float32)
    bias = f32(8)
    w = {"bq": bq, "bs": bs, "bias": bias}
    case(o, "dynamic_quantize_matmul", "DynamicQuantizeMatMul",
         [("x", x), ("bq", bq), ("bs", bs), None, ("bias", bias)], w, ["y"])
    bu = rng.integers(0, 256, size=(16, 8)).astype(np.uint8)
    bz = rng.integers(100, 150, size=(8,)).astype(np.uint8)
    case(o, "dynamic_quantize_matmul_u8_zp", "DynamicQuantizeMatMul",
         [("x", x), ("bu", bu), ("bs", bs), ("bz", bz)], {"bu": bu, "bs": bs, "bz": bz}, ["y"])
    au = rng.integers(0, 256, size=(3, 16)).astype(np.uint8)
    as_ = np.array(0.02, dtype=np.float32)
    az = np.array(120, dtype=np.uint8)
    case(o, "matmul_integer_to_float", "MatMulIntegerToFloat",
         [("au", au), ("bq", bq), ("as", as_), ("bs", bs), ("az", az), None, ("bias", bias)],
         {"bq": bq, "bs": bs, "as": as_, "az": az, "bias": bias}, ["y"])


def qlinear(o):
    a = rng.integers(0, 256, size=(2, 3, 4)).astype(np.uint8)
    b = rng.integers(0, 256, size=(2, 3, 4)).astype(np.uint8)
    s = {n: np.array(v, dtype=np.float32) for n, v in
         [("sa", 0.02), ("sb", 0.03), ("sc", 0.05), ("sy", 0.004)]}
    z = {n: np.array(v, dtype=np.uint8) for n, v in [("za", 128), ("zb", 120), ("zc", 130)]}
    par = {**s, **z}
    ins = [("a", a), ("sa", s["sa"]), ("za", z["za"]), ("b", b), ("sb", s["sb"]),
           ("zb", z["zb"]), ("sc", s["sc"]), ("zc", z["zc"])]
    case(o, "qlinear_add", "QLinearAdd", ins, par, ["y"], kind="int")
    case(o, "qlinear_mul", "QLinearMul", ins, par, ["y"], kind="int")
    ai = rng.integers(-128, 128, size=(2, 3, 4)).astype(np.int8)
    zi = {"zi": np.array(3, dtype=np.int8), "zo": np.array(-100, dtype=np.int8)}
    case(o, "qlinear_sigmoid", "QLinearSigmoid",
         [("a", ai), ("sa", s["sa"]), ("zi", zi["zi"]), ("sy", s["sy"]), ("zo", zi["zo"])],
         {**s, **zi}, ["y"], kind="int")
    case(o, "qlinear_leaky_relu", "QLinearLeakyRelu",
         [("a", a), ("sa", s["sa"]), ("za", z["za"]), ("sc", s["sc"]), ("zc", z["zc"])],
         par, ["y"], {"alpha": 0.1}, kind="int")
    img = rng.integers(0, 256, size=(2, 3, 5, 5)).astype(np.uint8)
    case(o, "qlinear_global_average_pool", "QLinearGlobalAveragePool",
         [("img", img), ("sa", s["sa"]), ("za", z["za"]), ("sb", s["sb"]), ("zb", z["zb"])],
         par, ["y"], kind="int")
    c2 = rng.integers(0, 256, size=(2, 2, 4)).astype(np.uint8)
    case(o, "qlinear_concat", "QLinearConcat",
         [("sc", s["sc"]), ("zc", z["zc"]), ("a", a), ("sa", s["sa"]), ("za", z["za"]),
          ("c2", c2), ("sb", s["sb"]), ("zb", z["zb"])], par, ["y"], {"axis": 1}, kind="int")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: contrib_ops.py OUT_DIR")
    out = sys.argv[1]
    for family in (activations, norms, attentions, products, qlinear):
        family(out)


if __name__ == "__main__":
    main()
