#!/usr/bin/env python3
"""Train the small bundled RLX demo model: a CNN on scikit-learn's 8x8 digits.

Requires: numpy, scikit-learn, safetensors
    pip install numpy scikit-learn safetensors

The dataset (sklearn.datasets.load_digits) ships with scikit-learn, so nothing
is downloaded. Training is pure numpy (hand-written forward/backward, Adam,
fixed seeds) and is reproducible; it takes well under a minute on 2 CPU cores.

Architecture (NCHW, float32):
    x      [N,1,8,8]   pixel values / 16.0
    conv1  W[8,1,3,3]  b[8]   stride 1, pad 1 -> relu -> maxpool 2x2/2 -> [N,8,4,4]
    conv2  W[16,8,3,3] b[16]  stride 1, pad 1 -> relu               -> [N,16,4,4]
    flatten (C,H,W order)                                           -> [N,256]
    fc1    W[64,256]   b[64]  (y = x @ W.T + b) -> relu
    fc2    W[10,64]    b[10]                                        -> logits [N,10]

Outputs (relative to the repo root):
    assets/demo/digits_cnn.safetensors   model weights (F32)
    assets/demo/digits_test.safetensors  images F32 [360,1,8,8], labels I64 [360],
                                         reference_logits F32 [360,10]
                                         (numpy forward in float64, cast to f32)
    assets/demo/README.md

Usage:
    python3 scripts/train_demo.py
"""

import json
import os
import struct
import sys

import numpy as np
from safetensors.numpy import load_file, save_file
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 0
TARGET_ACC = 0.97
MAX_EPOCHS = 200
BATCH = 32
LR = 1e-3

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "assets", "demo")
MODEL_PATH = os.path.join(OUT_DIR, "digits_cnn.safetensors")
TEST_PATH = os.path.join(OUT_DIR, "digits_test.safetensors")
README_PATH = os.path.join(OUT_DIR, "README.md")

PARAM_NAMES = [
    "conv1.weight", "conv1.bias",
    "conv2.weight", "conv2.bias",
    "fc1.weight", "fc1.bias",
    "fc2.weight", "fc2.bias",
]


# ----------------------------------------------------------------------------
# Layers (3x3 conv, stride 1, pad 1 via im2col)
# ----------------------------------------------------------------------------

def im2col3x3(x):
    """x [N,C,H,W] -> cols [N*H*W, C*9], column order (c, kh, kw)."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.empty((n, c, 3, 3, h, w), dtype=x.dtype)
    for i in range(3):
        for j in range(3):
            cols[:, :, i, j] = xp[:, :, i:i + h, j:j + w]
    # -> [N,H,W,C,3,3] -> [N*H*W, C*9]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * h * w, c * 9)


def col2im3x3(dcols, shape):
    """Adjoint of im2col3x3: dcols [N*H*W, C*9] -> dx [N,C,H,W]."""
    n, c, h, w = shape
    d = dcols.reshape(n, h, w, c, 3, 3).transpose(0, 3, 4, 5, 1, 2)
    dxp = np.zeros((n, c, h + 2, w + 2), dtype=dcols.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + h, j:j + w] += d[:, :, i, j]
    return dxp[:, :, 1:-1, 1:-1]


def conv_forward(x, wt, b):
    n, _, h, w = x.shape
    o = wt.shape[0]
    cols = im2col3x3(x)
    out = cols @ wt.reshape(o, -1).T + b  # [N*H*W, O]
    return out.reshape(n, h, w, o).transpose(0, 3, 1, 2), cols


def conv_backward(dout, cols, x_shape, wt):
    o = wt.shape[0]
    d = dout.transpose(0, 2, 3, 1).reshape(-1, o)  # [N*H*W, O]
    dw = (d.T @ cols).reshape(wt.shape)
    db = d.sum(axis=0)
    dx = col2im3x3(d @ wt.reshape(o, -1), x_shape)
    return dx, dw, db


def maxpool_forward(x):
    n, c, h, w = x.shape
    xr = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5)
    xr = xr.reshape(n, c, h // 2, w // 2, 4)
    idx = xr.argmax(axis=-1)  # first max on ties
    out = np.take_along_axis(xr, idx[..., None], axis=-1)[..., 0]
    return out, idx


def maxpool_backward(dout, idx, x_shape):
    n, c, h, w = x_shape
    d = np.zeros((n, c, h // 2, w // 2, 4), dtype=dout.dtype)
    np.put_along_axis(d, idx[..., None], dout[..., None], axis=-1)
    d = d.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5)
    return d.reshape(n, c, h, w)


# ----------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------

def init_params(rng):
    def he(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    return {
        "conv1.weight": he((8, 1, 3, 3), 9),
        "conv1.bias": np.zeros(8, np.float32),
        "conv2.weight": he((16, 8, 3, 3), 72),
        "conv2.bias": np.zeros(16, np.float32),
        "fc1.weight": he((64, 256), 256),
        "fc1.bias": np.zeros(64, np.float32),
        "fc2.weight": he((10, 64), 64),
        "fc2.bias": np.zeros(10, np.float32),
    }


def forward(p, x, keep=False):
    """Forward pass; dtype follows the inputs. Returns logits (and cache)."""
    c1, cols1 = conv_forward(x, p["conv1.weight"], p["conv1.bias"])
    r1 = np.maximum(c1, 0)
    m1, pidx = maxpool_forward(r1)
    c2, cols2 = conv_forward(m1, p["conv2.weight"], p["conv2.bias"])
    r2 = np.maximum(c2, 0)
    f = r2.reshape(r2.shape[0], -1)  # C,H,W order
    h1 = np.maximum(f @ p["fc1.weight"].T + p["fc1.bias"], 0)
    logits = h1 @ p["fc2.weight"].T + p["fc2.bias"]
    if not keep:
        return logits
    cache = dict(x=x, c1=c1, cols1=cols1, r1=r1, pidx=pidx, m1=m1,
                 c2=c2, cols2=cols2, r2=r2, f=f, h1=h1)
    return logits, cache


def loss_and_grads(p, x, y):
    logits, c = forward(p, x, keep=True)
    n = x.shape[0]
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    prob = e / e.sum(axis=1, keepdims=True)
    loss = -np.log(prob[np.arange(n), y] + 1e-12).mean()

    g = {}
    dlog = prob
    dlog[np.arange(n), y] -= 1.0
    dlog /= n
    g["fc2.weight"] = dlog.T @ c["h1"]
    g["fc2.bias"] = dlog.sum(0)
    dh1 = (dlog @ p["fc2.weight"]) * (c["h1"] > 0)
    g["fc1.weight"] = dh1.T @ c["f"]
    g["fc1.bias"] = dh1.sum(0)
    df = dh1 @ p["fc1.weight"]
    dc2 = df.reshape(c["r2"].shape) * (c["c2"] > 0)
    dm1, g["conv2.weight"], g["conv2.bias"] = conv_backward(
        dc2, c["cols2"], c["m1"].shape, p["conv2.weight"])
    dr1 = maxpool_backward(dm1, c["pidx"], c["r1"].shape)
    dc1 = dr1 * (c["c1"] > 0)
    _, g["conv1.weight"], g["conv1.bias"] = conv_backward(
        dc1, c["cols1"], c["x"].shape, p["conv1.weight"])
    return loss, g


def accuracy(logits, y):
    return float((logits.argmax(axis=1) == y).mean())


def reference_logits(p, x):
    """Reference forward in float64 from the stored f32 params, cast to f32."""
    p64 = {k: v.astype(np.float64) for k, v in p.items()}
    return forward(p64, x.astype(np.float64)).astype(np.float32)


def save_st(tensors, path, metadata):
    """safetensors save_file, then rewrite the JSON header with sorted metadata
    keys (the Rust writer uses a HashMap, so metadata order is otherwise random)
    so that regenerating the files is byte-for-byte reproducible."""
    save_file(tensors, path, metadata=metadata)
    with open(path, "r+b") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        hdr = json.loads(fh.read(n))
        hdr["__metadata__"] = dict(sorted(hdr["__metadata__"].items()))
        new = json.dumps(hdr, separators=(",", ":")).encode()
        assert len(new) <= n
        fh.seek(8)
        fh.write(new + b" " * (n - len(new)))  # spaces: valid header padding


# ----------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------

def main():
    digits = load_digits()
    x_all = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]  # [N,1,8,8]
    y_all = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x_all, y_all, test_size=360, stratify=y_all, random_state=0)
    x_tr = np.ascontiguousarray(x_tr, dtype=np.float32)
    x_te = np.ascontiguousarray(x_te, dtype=np.float32)
    print(f"train {x_tr.shape[0]}  test {x_te.shape[0]}")

    rng = np.random.default_rng(SEED)
    p = init_params(rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    b1, b2, eps = 0.9, 0.999, 1e-8
    t = 0

    acc = 0.0
    for epoch in range(1, MAX_EPOCHS + 1):
        perm = rng.permutation(x_tr.shape[0])
        tot = 0.0
        for s in range(0, len(perm), BATCH):
            bi = perm[s:s + BATCH]
            loss, g = loss_and_grads(p, x_tr[bi], y_tr[bi])
            tot += loss * len(bi)
            t += 1
            for k in PARAM_NAMES:
                gk = g[k].astype(np.float32)
                m[k] = b1 * m[k] + (1 - b1) * gk
                v[k] = b2 * v[k] + (1 - b2) * gk * gk
                mh = m[k] / (1 - b1 ** t)
                vh = v[k] / (1 - b2 ** t)
                p[k] = (p[k] - LR * mh / (np.sqrt(vh) + eps)).astype(np.float32)
        acc = accuracy(forward(p, x_te), y_te)
        print(f"epoch {epoch:3d}  loss {tot / len(perm):.4f}  test acc {acc:.4f}")
        if acc >= TARGET_ACC:
            break
    if acc < TARGET_ACC:
        sys.exit(f"did not reach {TARGET_ACC:.2%} held-out accuracy (got {acc:.4f})")

    # ---- write outputs ------------------------------------------------------
    os.makedirs(OUT_DIR, exist_ok=True)
    params = {k: np.ascontiguousarray(p[k], dtype=np.float32) for k in PARAM_NAMES}
    save_st(params, MODEL_PATH,
            metadata={"format": "rlx-demo", "arch": "digits-cnn-v1"})

    ref = reference_logits(params, x_te)
    save_st({
        "images": np.ascontiguousarray(x_te, dtype=np.float32),
        "labels": np.ascontiguousarray(y_te, dtype=np.int64),
        "reference_logits": np.ascontiguousarray(ref, dtype=np.float32),
    }, TEST_PATH, metadata={"format": "rlx-demo", "arch": "digits-cnn-v1"})

    # ---- verify by reloading ------------------------------------------------
    lm = load_file(MODEL_PATH)
    lt = load_file(TEST_PATH)
    assert sorted(lm) == sorted(PARAM_NAMES), sorted(lm)
    for k in PARAM_NAMES:
        assert lm[k].dtype == np.float32 and np.array_equal(lm[k], params[k]), k
    assert lt["images"].dtype == np.float32 and lt["images"].shape == (360, 1, 8, 8)
    assert lt["labels"].dtype == np.int64 and lt["labels"].shape == (360,)
    assert lt["reference_logits"].dtype == np.float32
    assert lt["reference_logits"].shape == (360, 10)
    re_ref = reference_logits(lm, lt["images"])
    assert np.array_equal(re_ref, lt["reference_logits"])
    final_acc = accuracy(lt["reference_logits"], lt["labels"])
    assert final_acc >= TARGET_ACC, final_acc

    with open(README_PATH, "w") as fh:
        fh.write(README_TEMPLATE.format(acc=final_acc * 100, epochs=epoch,
                                        meta=json.dumps({"format": "rlx-demo",
                                                         "arch": "digits-cnn-v1"})))
    print(f"held-out accuracy: {final_acc:.4f} ({int(round(final_acc * 360))}/360)")


README_TEMPLATE = """\
# RLX demo model: digits CNN

Small real model bundled for demos and parity tests.

- `digits_cnn.safetensors`: weights, all F32: `conv1.weight [8,1,3,3]`, `conv1.bias [8]`,
  `conv2.weight [16,8,3,3]`, `conv2.bias [16]`, `fc1.weight [64,256]`, `fc1.bias [64]`,
  `fc2.weight [10,64]`, `fc2.bias [10]`. Metadata `{meta}`.
- `digits_test.safetensors`: held-out set: `images` F32 [360,1,8,8] (pixels / 16),
  `labels` I64 [360], `reference_logits` F32 [360,10] (numpy forward pass in float64,
  cast to f32; computed outside RLX for parity tests).

Architecture (NCHW): x [N,1,8,8] -> conv1 3x3 s1 p1 (8) -> relu -> maxpool 2x2 s2 ->
conv2 3x3 s1 p1 (16) -> relu -> flatten (C,H,W) [N,256] -> fc1 (y = x @ W.T + b, 64) ->
relu -> fc2 (10) -> logits.

Held-out accuracy: {acc:.2f}% (360 samples, stratified split, `random_state=0`;
trained {epochs} epochs, numpy only, Adam, seed 0).

Regenerate (needs numpy, scikit-learn, safetensors): `python3 scripts/train_demo.py`

License: the 8x8 digits data is from the UCI ML repository ("Optical Recognition of
Handwritten Digits"), distributed with scikit-learn under BSD-3-Clause.
"""


if __name__ == "__main__":
    main()
