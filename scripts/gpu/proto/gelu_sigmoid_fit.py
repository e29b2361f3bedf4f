#!/usr/bin/env python3
# Numeric study (session 18, not part of RLX): how many FP32 operations an exact GELU needs in the
# sigmoid form GELU(x) = x / (1 + 2^(-x q(|x|))), q(a) = log2(Phi(a) / (1 - Phi(a))) / a, with q a
# polynomial of degree d in |x| (Horner: d FFMA, then x*q, 1 + e, x * r: d + 3 FP32 ops and 2 MUFU).
# Prints the worst error in f16 ulps of the exact value over [-10, 10]. Result: d = 6 gives 0.8 ulp,
# d = 8 0.1 ulp, i.e. 9-11 FP32 ops, no cheaper than the Abramowitz-Stegun form RLX uses (11 + 2 MUFU).
# Needs numpy and scipy.
import numpy as np
from scipy.special import ndtr, log_ndtr
# GELU(x) = x / (1 + 2^(-x q(|x|))),  q(a) = log2(Phi(a)/(1-Phi(a))) / a
def L(a): return (log_ndtr(a) - log_ndtr(-a)) / np.log(2)
A = 6.0
a = np.linspace(1e-3, A, 30000)
qt = L(a) / a
def f16_ulp(v):
    v = np.abs(v)
    e = np.floor(np.log2(np.maximum(v, 2**-14)))
    return 2.0 ** (e - 10)
def evalf(c, x, clampA):
    x = x.astype(np.float32)
    aa = np.minimum(np.abs(x), np.float32(clampA))
    p = np.float32(c[-1])
    for cc in c[-2::-1]:
        p = (p * aa + np.float32(cc)).astype(np.float32)
    t = (-x * p).astype(np.float32)
    e = np.exp2(t.astype(np.float64)).astype(np.float32)
    r = (1.0 / (1.0 + e.astype(np.float64))).astype(np.float32)
    return (x * r).astype(np.float32)
xt = np.linspace(-10, 10, 400001)
ref = xt * ndtr(xt)
for d in range(3, 9):
    w = np.ones_like(a) * a  # relative error of Phi(-a) ~ 0.69 a dq
    V = np.vander(a, d + 1, increasing=True)
    c = np.linalg.lstsq(V * w[:, None], qt * w, rcond=None)[0]
    for it in range(60):
        err = np.abs(V @ c - qt) * w
        w = w * (1 + 20 * err / err.max())
        w = w / w.max()
        c = np.linalg.lstsq(V * w[:, None], qt * w, rcond=None)[0]
    got = evalf(c, xt, A).astype(np.float64)
    ulps = np.abs(got - ref) / f16_ulp(ref)
    print(d, 'max err in f16 ulps of the exact value: %.3f' % ulps.max(), 'at x=%.3f' % xt[ulps.argmax()], ' max abs %.2e' % np.abs(got-ref).max(), 'coef', [float(np.float32(v)) for v in c])
