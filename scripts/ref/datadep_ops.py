#!/usr/bin/env python3
"""Writes small models whose output shapes depend on values computed at run time (NonZero,
NonMaxSuppression, Unique, TopK with a computed k, Compress with a computed condition), each
with a symbolic dim and random inputs at several sizes, and onnxruntime's outputs, in the
ONNX backend-test layout: OUT/<case>/model.onnx, OUT/<case>/test_data_set_N/{input,output}_M.pb.
Every data-dependent node reads values computed by other nodes, so nothing folds at import.
Usage: datadep_ops.py OUT_DIR. Needs numpy, onnx and onnxruntime (its CPU provider)."""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

rng = np.random.default_rng(24)


def write(out_dir, name, nodes, inputs, outputs, inits, data_sets):
    """inputs: (name, elem type, dims with strings for symbols); data_sets: list of feeds."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    results = [sess.run(outputs, feeds) for feeds in data_sets]
    del model.graph.output[:]
    for o, r in zip(outputs, results[0]):
        model.graph.output.append(helper.make_tensor_value_info(
            o, helper.np_dtype_to_tensor_dtype(r.dtype), None))
    case = os.path.join(out_dir, name)
    os.makedirs(case, exist_ok=True)
    onnx.save(model, os.path.join(case, "model.onnx"))
    for s, (feeds, outs) in enumerate(zip(data_sets, results)):
        d = os.path.join(case, f"test_data_set_{s}")
        os.makedirs(d, exist_ok=True)
        for i, (n, _, _) in enumerate(inputs):
            t = numpy_helper.from_array(feeds[n], n)
            open(os.path.join(d, f"input_{i}.pb"), "wb").write(t.SerializeToString())
        for i, (n, r) in enumerate(zip(outputs, outs)):
            t = numpy_helper.from_array(r, n)
            open(os.path.join(d, f"output_{i}.pb"), "wb").write(t.SerializeToString())


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def boolean_indexing(out):
    """`x[x > 0]` as torch.onnx.export writes it: Greater -> NonZero -> Transpose ->
    GatherND; plus the row indices that hold a positive value, via Unique of NonZero's first
    row (a second data-dependent stage)."""
    nodes = [
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.float32))),
        helper.make_node("Greater", ["x", "zero"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "idx"], ["y"]),
        helper.make_node("Gather", ["nz", "row0"], ["rows"], axis=0),
        helper.make_node("Unique", ["rows"], ["urows", "", "", "ucount"]),
        helper.make_node("Gather", ["x", "urows"], ["picked"], axis=0),
    ]
    inits = {"row0": np.array(0, np.int64)}
    sets = [{"x": f32(n, 5)} for n in (4, 9, 1)]
    write(out, "boolean_indexing", nodes, [("x", TP.FLOAT, ["n", 5])],
          ["y", "nz", "urows", "ucount", "picked"], inits, sets)


def nonzero_int(out):
    """NonZero of an integer tensor computed at run time (x mod 3)."""
    nodes = [helper.make_node("Mod", ["x", "three"], ["m"]),
             helper.make_node("NonZero", ["m"], ["nz"])]
    inits = {"three": np.array(3, np.int64)}
    sets = [{"x": rng.integers(0, 10, size=(n, 3, 2)).astype(np.int64)} for n in (2, 5)]
    write(out, "nonzero_int", nodes, [("x", TP.INT64, ["n", 3, 2])], ["nz"], inits, sets)


def detection(out, center):
    """A detector's postprocess: boxes and class logits -> sigmoid scores -> NMS -> the kept
    boxes, classes and scores gathered by the selected indices."""
    nodes = [
        helper.make_node("Add", ["boxes_in", "offset"], ["boxes"]),
        helper.make_node("Sigmoid", ["logits"], ["probs"]),
        helper.make_node("Transpose", ["probs"], ["scores"], perm=[0, 2, 1]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_th"],
                         ["sel"], center_point_box=1 if center else 0),
        helper.make_node("Gather", ["sel", "col2"], ["box_idx"], axis=1),
        helper.make_node("Gather", ["sel", "col1"], ["class_idx"], axis=1),
        helper.make_node("Squeeze", ["boxes", "axis0"], ["boxes0"]),
        helper.make_node("Gather", ["boxes0", "box_idx"], ["kept_boxes"], axis=0),
        helper.make_node("GatherND", ["scores", "sel"], ["kept_scores"]),
    ]
    inits = {"offset": np.array([0.0, 0.0, 0.0, 0.0], np.float32),
             "max_out": np.array([6], np.int64), "score_th": np.array([0.3], np.float32),
             "col1": np.array(1, np.int64), "col2": np.array(2, np.int64),
             "axis0": np.array([0], np.int64)}
    sets = []
    for n in (12, 30):
        centers = rng.uniform(0, 4, size=(1, n, 2)).astype(np.float32)
        sizes = rng.uniform(0.5, 2.0, size=(1, n, 2)).astype(np.float32)
        if center:
            b = np.concatenate([centers, sizes], axis=2)
        else:
            b = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=2)
            flip = rng.random((1, n)) < 0.3
            b[flip] = b[flip][:, [2, 3, 0, 1]]
        sets.append({"boxes_in": b.astype(np.float32), "logits": f32(1, n, 3),
                     "iou": np.array([0.4], np.float32)})
    name = "detection_center" if center else "detection_corners"
    write(out, name, nodes,
          [("boxes_in", TP.FLOAT, [1, "n", 4]), ("logits", TP.FLOAT, [1, "n", 3]),
           ("iou", TP.FLOAT, [1])],
          ["sel", "kept_boxes", "kept_scores", "class_idx", "scores"], inits, sets)


def top_k_computed(out):
    """TopK whose k is the number of positives in the first row of x (computed on the
    device), largest and smallest, along the last axis."""
    nodes = [
        helper.make_node("Gather", ["x", "row0"], ["first"], axis=0),
        helper.make_node("Greater", ["first", "zero"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["posi"], to=TP.INT64),
        helper.make_node("ReduceSum", ["posi", "axes"], ["k"], keepdims=1),
        helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1),
        helper.make_node("TopK", ["x", "k"], ["sv", "si"], axis=1, largest=0),
    ]
    inits = {"row0": np.array(0, np.int64), "zero": np.array(0, np.float32),
             "axes": np.array([0], np.int64)}
    sets = [{"x": f32(3, n)} for n in (8, 17)]
    write(out, "top_k_computed", nodes, [("x", TP.FLOAT, [3, "n"])], ["v", "i", "sv", "si"],
          inits, sets)


def unique_and_compress(out):
    """Unique (sorted and not, with an axis) of integer values computed at run time, and
    Compress with a computed condition, with and without an axis."""
    nodes = [
        helper.make_node("Mod", ["a", "four"], ["am"]),
        helper.make_node("Unique", ["am"], ["u", "ui", "uinv", "uc"]),
        helper.make_node("Unique", ["am"], ["n", "ni", "ninv", "nc"], sorted=0),
        helper.make_node("Unique", ["am"], ["r", "ri", "rinv", "rc"], axis=0),
        helper.make_node("Greater", ["s", "half"], ["keep"]),
        helper.make_node("Compress", ["x", "keep"], ["cx"], axis=0),
        helper.make_node("Compress", ["x", "keep"], ["cf"]),
    ]
    inits = {"four": np.array(4, np.int64), "half": np.array(0.5, np.float32)}
    sets = [{"a": rng.integers(0, 9, size=(n, 2)).astype(np.int64),
             "s": rng.random(n).astype(np.float32), "x": f32(n, 3)} for n in (6, 11)]
    write(out, "unique_and_compress", nodes,
          [("a", TP.INT64, ["n", 2]), ("s", TP.FLOAT, ["n"]), ("x", TP.FLOAT, ["n", 3])],
          ["u", "ui", "uinv", "uc", "n", "ni", "ninv", "nc", "r", "ri", "rinv", "rc", "cx", "cf"],
          inits, sets)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    boolean_indexing(out)
    nonzero_int(out)
    detection(out, center=False)
    detection(out, center=True)
    top_k_computed(out)
    unique_and_compress(out)


if __name__ == "__main__":
    main()
