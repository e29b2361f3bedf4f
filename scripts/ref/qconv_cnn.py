"""A small CNN quantized by onnxruntime, for the integer convolutions (QLinearConv, ConvInteger).

    python3 scripts/ref/qconv_cnn.py write            # the committed fixtures
    python3 scripts/ref/qconv_cnn.py live DIR SEED    # fresh inputs and ORT outputs in DIR

`write` builds a float CNN with onnx.helper (seeded weights): conv 3->16 3x3 + relu, conv
16->32 3x3 stride 2 groups 2 + relu, max pool, conv 32->32 3x3 dilation 2 + relu, conv 32->10
1x1, global average pool, flatten; then quantizes it twice:
- `qlinear`: quantize_static, QOperator format (QLinearConv, QLinearGlobalAveragePool), u8
  activations, per-channel i8 weights, calibrated on 16 random inputs;
- `convinteger`: quantize_dynamic of the convolutions (DynamicQuantizeLinear + ConvInteger).
Each lands in crates/rlx-onnx/tests/fixtures/qconv/<name>/ with model.onnx and
test_data_set_0 (one input, onnxruntime's output). `live` runs the committed models on a
new random input per model and writes `<name>/input_0.pb` and `<name>/output_0.pb` in DIR.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "rlx-onnx", "tests", "fixtures", "qconv")
SHAPE = [1, 3, 64, 64]
NAMES = ["qlinear", "convinteger"]


def float_model(rng):
    inits, nodes = [], []

    def conv(name, x, cin, cout, k, stride=1, pad=0, dil=1, group=1, relu=True):
        fan = cin // group * k * k
        w = (rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits.append(numpy_helper.from_array(w, name + "_w"))
        inits.append(numpy_helper.from_array(b, name + "_b"))
        nodes.append(helper.make_node(
            "Conv", [x, name + "_w", name + "_b"], [name], name=name,
            kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
            dilations=[dil, dil], group=group))
        if not relu:
            return name
        nodes.append(helper.make_node("Relu", [name], [name + "_relu"], name=name + "_relu"))
        return name + "_relu"

    y = conv("conv1", "x", 3, 16, 3, pad=1)
    y = conv("conv2", y, 16, 32, 3, stride=2, pad=1, group=2)
    nodes.append(helper.make_node("MaxPool", [y], ["pool"], kernel_shape=[2, 2], strides=[2, 2]))
    y = conv("conv3", "pool", 32, 32, 3, pad=2, dil=2)
    y = conv("conv4", y, 32, 10, 1, relu=False)
    nodes.append(helper.make_node("GlobalAveragePool", [y], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["logits"]))
    graph = helper.make_graph(
        nodes, "qconv_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [SHAPE[0], 10])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def random_input(rng):
    return rng.uniform(-1.0, 1.0, SHAPE).astype(np.float32)


def ort_run(path, x):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def save(dir, x, y):
    os.makedirs(dir, exist_ok=True)
    with open(os.path.join(dir, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    with open(os.path.join(dir, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y, "logits").SerializeToString())


def write():
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)
    rng = np.random.default_rng(24)
    tmp = os.path.join(ROOT, "float.onnx")
    os.makedirs(ROOT, exist_ok=True)
    onnx.save(float_model(rng), tmp)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"x": random_input(rng)} for _ in range(16)])

        def get_next(self):
            return next(self.items, None)

    out = {name: os.path.join(ROOT, name, "model.onnx") for name in NAMES}
    for p in out.values():
        os.makedirs(os.path.dirname(p), exist_ok=True)
    quantize_static(tmp, out["qlinear"], Reader(), quant_format=QuantFormat.QOperator,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    quantize_dynamic(tmp, out["convinteger"], op_types_to_quantize=["Conv"],
                     weight_type=QuantType.QUInt8)
    os.remove(tmp)
    for name, p in out.items():
        ops = sorted({n.op_type for n in onnx.load(p).graph.node})
        print(name, os.path.getsize(p), "bytes:", ", ".join(ops))
        x = random_input(rng)
        save(os.path.join(ROOT, name, "test_data_set_0"), x, ort_run(p, x))


def live(dir, seed):
    rng = np.random.default_rng(seed)
    for name in NAMES:
        x = random_input(rng)
        save(os.path.join(dir, name), x, ort_run(os.path.join(ROOT, name, "model.onnx"), x))


if __name__ == "__main__":
    if sys.argv[1:2] == ["write"]:
        write()
    elif sys.argv[1:2] == ["live"] and len(sys.argv) == 4:
        live(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
