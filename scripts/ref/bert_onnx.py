#!/usr/bin/env python3
"""Writes a MiniLM-shaped BERT encoder (6 layers, hidden 384, 12 heads, intermediate 1536,
vocabulary 30522; random weights, seeded) as ONNX with onnx.helper, in the node pattern an
exporter writes for Hugging Face's eager BERT (MatMul + Add linears, split heads through
Reshape/Transpose, scores scaled by Div, an additive (1 - mask) * -10000 mask, erf GELU,
LayerNormalization), so ONNX Runtime's transformer optimizer finds its fusions.
Inputs input_ids, attention_mask, token_type_ids (int64 [batch, sequence]); output
last_hidden_state [batch, sequence, 384].
Usage: bert_onnx.py OUT.onnx [--layers N]. Needs numpy and onnx."""
import argparse

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

HID, HEADS, FF, VOCAB, MAXPOS = 384, 12, 1536, 30522, 512


def build(layers, seed=0):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    count = [0]

    def w(name, *shape, std=0.05):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * std).astype(np.float32), name))
        return name

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op, ins, **attrs):
        count[0] += 1
        out = f"{op.lower()}_{count[0]}"
        nodes.append(helper.make_node(op, ins, [out], name=f"{op}_{count[0]}", **attrs))
        return out

    def ln(x, prefix):
        g = const(prefix + ".gamma", (1 + 0.1 * rng.standard_normal(HID)).astype(np.float32))
        b = w(prefix + ".beta", HID)
        return node("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-12)

    def linear(x, prefix, n_in, n_out):
        y = node("MatMul", [x, w(prefix + ".weight", n_in, n_out)])
        return node("Add", [y, w(prefix + ".bias", n_out)])

    # embeddings
    word = node("Gather", [w("word_embeddings", VOCAB, HID), "input_ids"], axis=0)
    shape = node("Shape", ["input_ids"])
    seq = node("Gather", [shape, const("one_i64", np.array(1, dtype=np.int64))], axis=0)
    seq1 = node("Unsqueeze", [seq, const("axes0", np.array([0], dtype=np.int64))])
    pos_ids = node("Slice", [const("position_ids", np.arange(MAXPOS, dtype=np.int64)[None]),
                             const("zero_1d", np.array([0], dtype=np.int64)), seq1,
                             const("axis1_1d", np.array([1], dtype=np.int64))])
    pos = node("Gather", [w("position_embeddings", MAXPOS, HID), pos_ids], axis=0)
    tok = node("Gather", [w("token_type_embeddings", 2, HID), "token_type_ids"], axis=0)
    h = node("Add", [word, pos])
    h = node("Add", [h, tok])
    h = ln(h, "embeddings.LayerNorm")
    # additive mask [B, 1, 1, S]
    m = node("Unsqueeze", ["attention_mask", const("axes1", np.array([1], dtype=np.int64))])
    m = node("Unsqueeze", [m, const("axes2", np.array([2], dtype=np.int64))])
    m = node("Cast", [m], to=TP.FLOAT)
    m = node("Sub", [const("one_f", np.array(1.0, dtype=np.float32)), m])
    mask = node("Mul", [m, const("neg_big", np.array(-10000.0, dtype=np.float32))])
    head = HID // HEADS
    split = const("split_shape", np.array([0, 0, HEADS, head], dtype=np.int64))
    merge = const("merge_shape", np.array([0, 0, HID], dtype=np.int64))
    scale = const("sqrt_head", np.array(np.sqrt(head), dtype=np.float32))
    for i in range(layers):
        p = f"layer.{i}."
        q = node("Transpose", [node("Reshape", [linear(h, p + "query", HID, HID), split])],
                 perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(h, p + "key", HID, HID), split])],
                 perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(h, p + "value", HID, HID), split])],
                 perm=[0, 2, 1, 3])
        s = node("Div", [node("MatMul", [q, k]), scale])
        s = node("Softmax", [node("Add", [s, mask])], axis=-1)
        ctx = node("Transpose", [node("MatMul", [s, v])], perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, merge])
        a = linear(ctx, p + "attention.output", HID, HID)
        h = ln(node("Add", [a, h]), p + "attention.LayerNorm")
        f = linear(h, p + "intermediate", HID, FF)
        g = node("Div", [f, const(p + "sqrt2", np.array(np.sqrt(2), dtype=np.float32))])
        g = node("Add", [node("Erf", [g]), const(p + "one", np.array(1.0, dtype=np.float32))])
        g = node("Mul", [node("Mul", [f, g]), const(p + "half", np.array(0.5, dtype=np.float32))])
        o = linear(g, p + "output", FF, HID)
        h = ln(node("Add", [o, h]), p + "output.LayerNorm")
    nodes[-1].output[0] = "last_hidden_state"
    dims = ["batch", "sequence"]
    inputs = [helper.make_tensor_value_info(n, TP.INT64, dims)
              for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = helper.make_tensor_value_info("last_hidden_state", TP.FLOAT, dims + [HID])
    graph = helper.make_graph(nodes, "bert", inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=6)
    args = ap.parse_args()
    model = build(args.layers)
    onnx.checker.check_model(model)
    onnx.save(model, args.out)


if __name__ == "__main__":
    main()
