"""Small ONNX models with a dynamic batch axis, built with the onnx helper API."""

import numpy as np


def _h():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    return onnx, TensorProto, helper, numpy_helper


def _model(helper, graph, opset=17):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def add():
    """y = a + b, f32[batch, 4]: the overhead benchmark's model."""
    _, TP, helper, _ = _h()
    a = helper.make_tensor_value_info("a", TP.FLOAT, ["batch", 4])
    b = helper.make_tensor_value_info("b", TP.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TP.FLOAT, ["batch", 4])
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add", [a, b], [y])
    return _model(helper, g)


def mlp(seed=0, d_in=16, hidden=32, d_out=8):
    """Linear -> ReLU -> Linear -> Softmax with two outputs (logits, probabilities)."""
    _, TP, helper, nh = _h()
    r = np.random.default_rng(seed)
    inits = [
        nh.from_array(r.standard_normal((d_in, hidden)).astype(np.float32), "w1"),
        nh.from_array(r.standard_normal(hidden).astype(np.float32), "b1"),
        nh.from_array(r.standard_normal((hidden, d_out)).astype(np.float32), "w2"),
        nh.from_array(r.standard_normal(d_out).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["l0"]),
        helper.make_node("Add", ["l0", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["batch", d_in])
    outs = [
        helper.make_tensor_value_info("logits", TP.FLOAT, ["batch", d_out]),
        helper.make_tensor_value_info("probs", TP.FLOAT, ["batch", d_out]),
    ]
    return _model(helper, helper.make_graph(nodes, "mlp", [x], outs, inits))


def conv(seed=0):
    """Conv 3x3 (pad 1) -> Relu -> MaxPool 2x2 -> GlobalAveragePool, f32[N, 3, 8, 8]."""
    _, TP, helper, nh = _h()
    r = np.random.default_rng(seed)
    inits = [
        nh.from_array(r.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        nh.from_array(r.standard_normal(4).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["N", 3, 8, 8])
    y = helper.make_tensor_value_info("y", TP.FLOAT, ["N", 4, 1, 1])
    return _model(helper, helper.make_graph(nodes, "conv", [x], [y], inits))


def elementwise():
    """A mix of elementwise and reduction ops over f32[batch, 6] plus an int64 output."""
    _, TP, helper, _ = _h()
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("Sigmoid", ["x"], ["sg"]),
        helper.make_node("Tanh", ["sq"], ["th"]),
        helper.make_node("Sub", ["sg", "th"], ["d"]),
        helper.make_node("Exp", ["d"], ["e"]),
        helper.make_node("ReduceMean", ["e"], ["m"], axes=[1], keepdims=1),
        helper.make_node("Div", ["e", "m"], ["y"]),
        helper.make_node("ArgMax", ["x"], ["idx"], axis=1, keepdims=0),
    ]
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 6])
    outs = [
        helper.make_tensor_value_info("y", TP.FLOAT, ["batch", 6]),
        helper.make_tensor_value_info("idx", TP.INT64, ["batch"]),
    ]
    return _model(helper, helper.make_graph(nodes, "elementwise", [x], outs), opset=13)


def positives():
    """`x[x > 0]` as torch.onnx.export writes it (Greater -> NonZero -> Transpose ->
    GatherND), with the indices too: output shapes that depend on the values of x."""
    _, TP, helper, nh = _h()
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 6])
    y = helper.make_tensor_value_info("y", TP.FLOAT, ["n"])
    idx = helper.make_tensor_value_info("idx", TP.INT64, ["n", 2])
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "idx"], ["y"]),
    ]
    zero = nh.from_array(np.array(0, np.float32), "zero")
    g = helper.make_graph(nodes, "positives", [x], [y, idx], [zero])
    return _model(helper, g)
