"""IOBinding (ONNX Runtime's API) and device arrays: bound runs equal plain runs, outputs
stay on the device and feed the next run, DLPack both ways, errors naming the input or
output. CPU here; CUDA with PyTorch where both are present (SKIPPED otherwise)."""

import numpy as np
import pytest

import models
from conftest import need, ort_session, rng, save, skip

import rlx

RTOL, ATOL = 1e-4, 1e-5


def bound_run(sess, feeds, outputs):
    """The ONNX Runtime IOBinding idiom, the same code for both libraries."""
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    for name in outputs:
        binding.bind_output(name)
    sess.run_with_iobinding(binding)
    return binding.copy_outputs_to_cpu()


def test_same_code_as_onnxruntime(tmp):
    need("onnx")
    path = save(models.mlp(), tmp)
    x = rng(1).standard_normal((5, 16)).astype(np.float32)
    got = bound_run(rlx.InferenceSession(path, device="cpu"), {"x": x}, ["probs", "logits"])
    want = bound_run(ort_session(path), {"x": x}, ["probs", "logits"])
    assert len(got) == 2
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_every_output_when_none_is_bound(tmp):
    need("onnx")
    sess = rlx.InferenceSession(save(models.mlp(), tmp), device="cpu")
    x = rng(2).standard_normal((3, 16)).astype(np.float32)
    binding = sess.io_binding()
    binding.bind_input("x", x)
    sess.run_with_iobinding(binding)
    outs = binding.get_outputs()
    assert [type(o) for o in outs] == [rlx.DeviceArray, rlx.DeviceArray]
    assert outs[0].shape == [3, 8] and outs[0].type == "tensor(float)" and outs[0].device == "cpu"
    for o, w in zip(outs, sess.run(None, {"x": x})):  # declared order: logits, probs
        np.testing.assert_allclose(o.numpy(), w, rtol=RTOL, atol=ATOL)


def test_outputs_feed_the_next_run_in_a_loop(tmp):
    need("onnx")
    sess = rlx.InferenceSession(save(models.add(), tmp), device="cpu")
    a = rng(3).standard_normal((2, 4)).astype(np.float32)
    b = rng(4).standard_normal((2, 4)).astype(np.float32)
    binding = sess.io_binding()
    binding.bind_input("a", a)
    binding.bind_input("b", b)
    binding.bind_output("y", "cpu")
    want = a
    for _ in range(10):
        sess.run_with_iobinding(binding)
        (y,) = binding.get_outputs()
        want = want + b
        np.testing.assert_allclose(y.numpy(), want, rtol=RTOL, atol=ATOL)
        binding.bind_input("a", y)  # the device array itself: no copy


def test_device_arrays_speak_dlpack(tmp):
    need("onnx")
    sess = rlx.InferenceSession(save(models.add(), tmp), device="cpu")
    a = rng(5).standard_normal((3, 4)).astype(np.float32)
    b = rng(6).standard_normal((3, 4)).astype(np.float32)
    binding = sess.io_binding()
    binding.bind_input("a", a)
    binding.bind_input("b", b)
    sess.run_with_iobinding(binding)
    (y,) = binding.get_outputs()
    assert y.__dlpack_device__() == (1, 0)
    y1, y2 = np.from_dlpack(y), np.from_dlpack(y)
    assert np.shares_memory(y1, y2) and y1.ctypes.data == y.data_ptr()
    np.testing.assert_allclose(y1, a + b, rtol=RTOL)
    np.testing.assert_allclose(np.asarray(y), a + b, rtol=RTOL)
    # a later run writes a new buffer: what numpy holds stays as it was
    binding.bind_input("a", b)
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(y1, a + b, rtol=RTOL)
    np.testing.assert_allclose(binding.get_outputs()[0].numpy(), b + b, rtol=RTOL)


def test_outputs_into_the_callers_memory(tmp):
    need("onnx")
    sess = rlx.InferenceSession(save(models.add(), tmp), device="cpu")
    a = rng(7).standard_normal((3, 4)).astype(np.float32)
    b = rng(8).standard_normal((3, 4)).astype(np.float32)
    out = np.zeros((3, 4), np.float32)
    binding = sess.io_binding()
    # ONNX Runtime's raw form: device type, id, element type, shape, pointer
    binding.bind_input("a", "cpu", 0, np.float32, [3, 4], a.ctypes.data)
    binding.bind_input("b", b)
    binding.bind_output("y", out)  # a DLPack producer: written in place
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(out, a + b, rtol=RTOL)
    raw = np.zeros((3, 4), np.float32)
    binding.bind_output("y", "cpu", 0, np.float32, [3, 4], raw.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(raw, a + b, rtol=RTOL)


def test_bad_bindings_are_errors_naming_them(tmp):
    need("onnx")
    sess = rlx.InferenceSession(save(models.mlp(), tmp), device="cpu")
    binding = sess.io_binding()
    binding.bind_input("x", np.zeros((2, 15), np.float32))
    with pytest.raises(rlx.InvalidArgument, match=r"input `x`.*f32\[2, 15\]"):
        sess.run_with_iobinding(binding)
    binding.bind_input("x", np.zeros((2, 16), np.float32))
    binding.bind_output("logits", np.zeros((2, 7), np.float32))
    with pytest.raises(rlx.InvalidArgument, match=r"output `logits`.*\[2, 7\]"):
        sess.run_with_iobinding(binding)
    binding.clear_binding_outputs()
    binding.bind_output("nope")
    with pytest.raises(rlx.InvalidArgument, match="output `nope`.*logits"):
        sess.run_with_iobinding(binding)
    with pytest.raises(rlx.DeviceError, match="session runs on cpu"):
        binding.bind_output("logits", "cuda")
    with pytest.raises(rlx.InvalidArgument, match="element_type"):
        binding.bind_input("x", "cpu", 0, None, [2, 16], 1234)
    other = rlx.InferenceSession(save(models.mlp(), tmp, "other.onnx"), device="cpu")
    with pytest.raises(rlx.InvalidArgument, match="another InferenceSession"):
        other.run_with_iobinding(binding)
    # the binding still works after the errors
    binding.clear_binding_outputs()
    sess.run_with_iobinding(binding)
    assert len(binding.get_outputs()) == 2


def test_torch_cuda_tensors_bind_without_a_copy(tmp):
    need("onnx")
    torch = need("torch")
    if not torch.cuda.is_available():
        skip("torch has no CUDA device")
    ds = {d["device"]: d for d in rlx.devices()}
    if not ds["cuda"]["available"]:
        skip(f"rlx cuda: {ds['cuda']['reason']}")
    sess = rlx.InferenceSession(save(models.add(), tmp), device="cuda")
    a = torch.randn(64, 4, device="cuda")
    b = torch.randn(64, 4, device="cuda")
    y = torch.empty(64, 4, device="cuda")
    binding = sess.io_binding()
    binding.bind_input("a", a)
    binding.bind_input("b", b)
    binding.bind_output("y", y)  # written in place
    sess.run_with_iobinding(binding)
    torch.testing.assert_close(y, a + b)
    binding.bind_output("y", "cuda")  # left in RLX's memory, handed to torch by DLPack
    for _ in range(5):
        sess.run_with_iobinding(binding)
        (out,) = binding.get_outputs()
        assert out.device == "cuda" and out.__dlpack_device__() == (2, 0)
        t = torch.from_dlpack(out)
        assert t.device.type == "cuda" and t.data_ptr() == out.data_ptr()
        torch.testing.assert_close(t, a + b)
        binding.bind_input("a", out)  # the output feeds the next run on the device
        a = t
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], (a + b).cpu().numpy(), rtol=RTOL)
