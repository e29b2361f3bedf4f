"""rlx.InferenceSession against onnxruntime on models built here, bad input, threads, DLPack."""

import threading

import numpy as np
import pytest

import models
from conftest import need, ort_session, rng, save, skip

import rlx

RTOL, ATOL = 1e-4, 1e-5


def check_against_ort(path, feeds, names=None):
    want = ort_session(path).run(names, feeds)
    got = rlx.InferenceSession(path, device="cpu").run(names, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("batch", [1, 3, 17])
def test_mlp_matches_onnxruntime(tmp, batch):
    need("onnx")
    path = save(models.mlp(), tmp)
    x = rng(batch).standard_normal((batch, 16)).astype(np.float32)
    check_against_ort(path, {"x": x})
    check_against_ort(path, {"x": x}, ["probs"])


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_conv_matches_onnxruntime(tmp, batch):
    need("onnx")
    path = save(models.conv(), tmp)
    x = rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
    check_against_ort(path, {"x": x})


def test_elementwise_matches_onnxruntime(tmp):
    need("onnx")
    path = save(models.elementwise(), tmp)
    for batch in (1, 4, 9):
        x = rng(batch).standard_normal((batch, 6)).astype(np.float32)
        check_against_ort(path, {"x": x})


def test_data_dependent_shapes_match_onnxruntime(tmp):
    need("onnx")
    path = save(models.positives(), tmp)
    for batch in (1, 4, 9):
        x = rng(batch).standard_normal((batch, 6)).astype(np.float32)
        check_against_ort(path, {"x": x})


def test_inputs_and_outputs_describe_the_model(tmp):
    need("onnx")
    sess = rlx.InferenceSession(save(models.mlp(), tmp), device="cpu")
    ins = sess.get_inputs()
    assert [(i.name, i.shape, i.type) for i in ins] == [("x", ["batch", 16], "tensor(float)")]
    outs = sess.get_outputs()
    assert [o.name for o in outs] == ["logits", "probs"]
    assert outs[0].shape == ["batch", 8] and outs[0].type == "tensor(float)"
    idx = rlx.InferenceSession(save(models.elementwise(), tmp, "e.onnx"), device="cpu")
    assert idx.get_outputs()[1].type == "tensor(int64)"


def test_one_line_switch_from_onnxruntime(tmp):
    """The ONNX Runtime call shape works unchanged: providers=..., positional run args."""
    need("onnx")
    path = save(models.mlp(), tmp)
    sess = rlx.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert sess.device == "cpu"
    x = rng().standard_normal((2, 16)).astype(np.float32)
    (logits,) = sess.run(["logits"], {"x": x})
    assert logits.shape == (2, 8)
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_session_options_and_provider_options(tmp):
    """ONNX Runtime's sess_options set the threads; a device_id other than 0 is refused."""
    need("onnx")
    path = save(models.mlp(), tmp)
    so = rlx.SessionOptions()
    so.intra_op_num_threads = 1
    sess = rlx.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
    assert sess.get_session_options().intra_op_num_threads == 1
    x = rng().standard_normal((3, 16)).astype(np.float32)
    check_against_ort(path, {"x": x})
    assert sess.run(None, {"x": x})[0].shape == (3, 8)
    assert rlx.InferenceSession(path, device="cpu").get_session_options().intra_op_num_threads == 0
    # an explicit threads= wins; a dict works as sess_options too
    sess = rlx.InferenceSession(path, device="cpu", sess_options={"intra_op_num_threads": 2}, threads=1)
    assert sess.get_session_options().intra_op_num_threads == 1
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    if ort is not None:
        oso = ort.SessionOptions()
        oso.intra_op_num_threads = 2
        sess = rlx.InferenceSession(path, sess_options=oso, providers=["CPUExecutionProvider"])
        assert sess.get_session_options().intra_op_num_threads == 2
    so.intra_op_num_threads = -1
    with pytest.raises(rlx.InvalidArgument, match="intra_op_num_threads"):
        rlx.InferenceSession(path, device="cpu", sess_options=so)
    with pytest.raises(rlx.InvalidArgument, match="device_id"):
        rlx.InferenceSession(path, providers=[("CPUExecutionProvider", {"device_id": 1})])
    with pytest.raises(rlx.InvalidArgument, match="device_id"):
        rlx.InferenceSession(path, providers=["CPUExecutionProvider"], provider_options=[{"device_id": "3"}])
    rlx.InferenceSession(path, providers=[("CPUExecutionProvider", {"device_id": 0, "arena_extend_strategy": "x"})])


def test_model_from_bytes_and_non_contiguous_input(tmp):
    need("onnx")
    path = save(models.mlp(), tmp)
    with open(path, "rb") as f:
        sess = rlx.InferenceSession(f.read(), device="cpu")
    x = rng().standard_normal((16, 6)).astype(np.float32).T  # Fortran order: copied once
    want = ort_session(path).run(None, {"x": np.ascontiguousarray(x)})
    got = sess.run(None, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)


def test_wrong_dtype_raises_invalid_argument(tmp):
    need("onnx")
    sess = rlx.InferenceSession(save(models.mlp(), tmp), device="cpu")
    x = rng().standard_normal((2, 16))  # float64
    with pytest.raises(rlx.InvalidArgument, match="x"):
        sess.run(None, {"x": x})
    with pytest.raises(rlx.InvalidArgument, match="complex"):
        sess.run(None, {"x": x.astype(np.complex64)})


def test_missing_and_unknown_inputs_raise(tmp):
    need("onnx")
    sess = rlx.InferenceSession(save(models.add(), tmp), device="cpu")
    a = np.ones((2, 4), np.float32)
    with pytest.raises(rlx.InvalidArgument, match="b"):
        sess.run(None, {"a": a})
    with pytest.raises(rlx.InvalidArgument):
        sess.run(None, {"a": a, "b": a, "c": a})
    with pytest.raises(rlx.InvalidArgument, match="nope"):
        sess.run(["nope"], {"a": a, "b": a})


def test_wrong_rank_and_size_raise(tmp):
    need("onnx")
    sess = rlx.InferenceSession(save(models.mlp(), tmp), device="cpu")
    with pytest.raises(rlx.InvalidArgument):
        sess.run(None, {"x": np.ones((2, 3, 16), np.float32)})
    with pytest.raises(rlx.InvalidArgument):
        sess.run(None, {"x": np.ones((2, 15), np.float32)})
    sess2 = rlx.InferenceSession(save(models.add(), tmp, "add.onnx"), device="cpu")
    with pytest.raises(rlx.InvalidArgument, match="batch"):
        sess2.run(None, {"a": np.ones((2, 4), np.float32), "b": np.ones((3, 4), np.float32)})


def test_unknown_file_and_bad_arguments_raise(tmp):
    with pytest.raises(rlx.ModelError, match="no-such.onnx"):
        rlx.InferenceSession(str(tmp / "no-such.onnx"), device="cpu")
    bad = tmp / "bad.onnx"
    bad.write_bytes(b"this is not protobuf")
    with pytest.raises(rlx.ModelError):
        rlx.InferenceSession(str(bad), device="cpu")
    need("onnx")
    path = save(models.add(), tmp)
    with pytest.raises(rlx.InvalidArgument, match="precision"):
        rlx.InferenceSession(path, device="cpu", precision="f8")
    with pytest.raises(rlx.InvalidArgument):
        rlx.InferenceSession(path, device="no-such-device")
    assert issubclass(rlx.InvalidArgument, rlx.RlxError)
    assert issubclass(rlx.ModelError, rlx.RlxError)
    assert issubclass(rlx.DeviceError, rlx.RlxError)


def test_unavailable_device_raises_device_error(tmp):
    need("onnx")
    path = save(models.add(), tmp)
    missing = [d for d in rlx.devices() if not d["available"]]
    if not missing:
        skip("every device is available here")
    with pytest.raises(rlx.DeviceError, match=missing[0]["device"]):
        rlx.InferenceSession(path, device=missing[0]["device"])


def test_threads_share_one_session(tmp):
    need("onnx")
    path = save(models.mlp(), tmp)
    sess = rlx.InferenceSession(path, device="cpu")
    ref = ort_session(path)
    errors = []

    def work(seed):
        try:
            for i in range(20):
                batch = 1 + (seed + i) % 5
                x = rng(seed * 100 + i).standard_normal((batch, 16)).astype(np.float32)
                got = sess.run(None, {"x": x})
                want = ref.run(None, {"x": x})
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
        except Exception as e:  # reported on the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_dlpack_out_without_copy(tmp):
    need("onnx")
    sess = rlx.InferenceSession(save(models.add(), tmp), device="cpu")
    a = rng(1).standard_normal((3, 4)).astype(np.float32)
    b = rng(2).standard_normal((3, 4)).astype(np.float32)
    (t,) = sess.run_tensors(None, {"a": a, "b": b})
    assert isinstance(t, rlx.Tensor) and t.shape == [3, 4] and t.type == "tensor(float)"
    assert t.__dlpack_device__() == (1, 0)
    y1 = np.from_dlpack(t)
    y2 = np.from_dlpack(t)
    assert np.shares_memory(y1, y2)  # both read the tensor's own buffer
    np.testing.assert_allclose(y1, a + b, rtol=RTOL)
    np.testing.assert_allclose(np.asarray(t), a + b, rtol=RTOL)


class DLPackOnly:
    """An object that offers only the DLPack protocol (as a torch tensor would)."""

    def __init__(self, array, device=(1, 0)):
        self.array = array
        self.device = device

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.device


def test_dlpack_in(tmp):
    need("onnx")
    sess = rlx.InferenceSession(save(models.add(), tmp), device="cpu")
    a = rng(3).standard_normal((2, 4)).astype(np.float32)
    b = rng(4).standard_normal((4, 2)).astype(np.float32).T  # strided: gathered
    (y,) = sess.run(None, {"a": DLPackOnly(a), "b": DLPackOnly(b)})
    np.testing.assert_allclose(y, a + b, rtol=RTOL)
    with pytest.raises(rlx.DeviceError, match="CUDA"):
        sess.run(None, {"a": DLPackOnly(a, (2, 0)), "b": b})


def test_devices_lists_the_cpu():
    ds = {d["device"]: d for d in rlx.devices()}
    assert ds["cpu"]["registered"] and ds["cpu"]["available"]
    for d in ds.values():
        assert d["available"] or d["reason"]
