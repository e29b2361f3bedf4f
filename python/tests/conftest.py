"""Shared helpers: ONNX models built with the onnx helper API at test time, the real models'
folder, and honest skips (`SKIPPED: <reason>` on stdout, counted by scripts/test.sh)."""

import os
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
MODELS = pathlib.Path(os.environ.get("RLX_MODELS_DIR", REPO / "models"))


def skip(reason):
    """Skips the calling test, saying why where scripts/test.sh counts it."""
    print(f"SKIPPED: {reason}")
    log = os.environ.get("RLX_PY_SKIP_LOG")  # scripts/test.sh lists the reasons
    if log:
        with open(log, "a") as f:
            f.write(f"{reason}\n")
    pytest.skip(reason)


def need(module):
    """Imports a module the test needs, or skips."""
    try:
        return __import__(module)
    except ImportError:
        skip(f"the Python package `{module}` is not installed")


def model_path(rel):
    """A file or folder under models/ (scripts/fetch-models.sh), or a skip."""
    p = MODELS / rel
    if not p.exists():
        skip(f"{p} is absent (run scripts/fetch-models.sh)")
    return str(p)


def rng(seed=0):
    return np.random.default_rng(seed)


def save(model, tmp_path, name="model.onnx"):
    """Checks and writes an onnx ModelProto; returns its path."""
    onnx = need("onnx")
    onnx.checker.check_model(model)
    path = tmp_path / name
    onnx.save(model, str(path))
    return str(path)


def ort_session(path):
    ort = need("onnxruntime")
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


@pytest.fixture
def tmp(tmp_path):
    return tmp_path
