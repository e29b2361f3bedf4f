#!/usr/bin/env python3
"""The MiniLM-shaped BERT of bert_onnx.py as ONNX Runtime's tools rewrite it, each in the
ONNX backend-test layout (OUT/<variant>/model.onnx, test_data_set_0/{input,output}_N.pb)
with random ids, a padded attention mask and onnxruntime's (CPU) outputs:
  optimized           transformer optimizer (EmbedLayerNormalization, Attention,
                      SkipLayerNormalization, BiasGelu)
  optimized_fastgelu  the same with the GELU approximation (FastGelu)
  optimized_int8      optimizer, then quantize_dynamic on the MatMuls (DynamicQuantizeLinear,
                      MatMulInteger)
  int8_ort            quantize_dynamic, then onnxruntime's own graph optimizations saved
                      (DynamicQuantizeMatMul, MatMulIntegerToFloat, FusedMatMul, Gelu, ...)
The inputs and onnxruntime's outputs are also written as OUT/<variant>/npy/NAME.npy and
npy/ort_NAME.npy. With --time N each variant's onnxruntime run is timed (median of N runs
after 3 warm-up, ms) into OUT/<variant>/ort_ms.txt.
Usage: bert_contrib.py OUT_DIR [--layers 6] [--batch 2] [--seq 128] [--time N]."""
import argparse
import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bert_onnx  # noqa: E402


def quiet():
    ort.set_default_logger_severity(3)


def inputs(batch, seq, seed=7):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 30000, size=(batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    if batch > 1:
        mask[1, seq * 3 // 4:] = 0  # right padding on the second row
    tt = np.zeros((batch, seq), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}


def write_case(out, name, model_path, feeds, reps):
    d = os.path.join(out, name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    model = onnx.load(model_path)
    onnx.save(model, os.path.join(d, "model.onnx"))
    opts = ort.SessionOptions()
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), opts,
                                providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feed = {n: feeds[n] for n in names}
    outs = sess.run(None, feed)
    for i, n in enumerate(names):
        with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feed[n], n).SerializeToString())
    for i, (o, a) in enumerate(zip(sess.get_outputs(), outs)):
        with open(os.path.join(data, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, o.name).SerializeToString())
    # the same as .npy files, for `rlx run --input NAME=FILE.npy` / `--out`
    npy = os.path.join(d, "npy")
    os.makedirs(npy, exist_ok=True)
    for n in names:
        np.save(os.path.join(npy, n + ".npy"), feed[n])
    for o, a in zip(sess.get_outputs(), outs):
        np.save(os.path.join(npy, "ort_" + o.name + ".npy"), a)
    if reps:
        for _ in range(3):
            sess.run(None, feed)
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            sess.run(None, feed)
            times.append((time.perf_counter() - t) * 1e3)
        with open(os.path.join(d, "ort_ms.txt"), "w") as f:
            f.write(f"{np.median(times):.3f}\n")
    ops = sorted({(n.domain or "ai.onnx") + ":" + n.op_type for n in model.graph.node})
    with open(os.path.join(d, "ops.txt"), "w") as f:
        f.write("\n".join(ops) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--time", type=int, default=0)
    args = ap.parse_args()
    quiet()
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    work = os.path.join(args.out, "_work")
    os.makedirs(work, exist_ok=True)
    plain = os.path.join(work, "bert.onnx")
    onnx.save(bert_onnx.build(args.layers), plain)
    feeds = inputs(args.batch, args.seq)
    variants = {}
    for name, approx in (("optimized", False), ("optimized_fastgelu", True)):
        fo = FusionOptions("bert")
        fo.enable_gelu_approximation = approx
        m = optimize_model(plain, model_type="bert", num_heads=bert_onnx.HEADS,
                           hidden_size=bert_onnx.HID, optimization_options=fo, opt_level=0)
        variants[name] = os.path.join(work, name + ".onnx")
        m.save_model_to_file(variants[name])
    ex = {"DefaultTensorType": onnx.TensorProto.FLOAT}
    variants["optimized_int8"] = os.path.join(work, "optimized_int8.onnx")
    quantize_dynamic(variants["optimized"], variants["optimized_int8"],
                     weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                     extra_options=ex)
    q = os.path.join(work, "int8.onnx")
    quantize_dynamic(plain, q, weight_type=QuantType.QInt8, extra_options=ex)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = os.path.join(work, "int8_ort.onnx")
    ort.InferenceSession(q, so, providers=["CPUExecutionProvider"])
    variants["int8_ort"] = so.optimized_model_filepath
    variants["plain"] = plain
    for name, path in variants.items():
        write_case(args.out, name, path, feeds, args.time)


if __name__ == "__main__":
    main()
