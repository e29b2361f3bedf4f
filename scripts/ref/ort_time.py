#!/usr/bin/env python3
"""Median time (ms) of onnxruntime (CPU EP; intra-op threads from ORT_THREADS, default 0 =
onnxruntime's own choice) running DIR/model.onnx on the inputs in DIR/npy/*.npy (files named
ort_* are outputs and skipped), after 3 warm-up runs.
Usage: ort_time.py DIR [ITERS] (default 15). Prints the median, then the minimum."""
import glob
import os
import sys
import time

import numpy as np
import onnxruntime as ort


def main():
    d = sys.argv[1]
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    ort.set_default_logger_severity(3)
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(os.environ.get("ORT_THREADS", "0"))
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"),
                                providers=["CPUExecutionProvider"], sess_options=so)
    feed = {}
    for f in glob.glob(os.path.join(d, "npy", "*.npy")):
        name = os.path.basename(f)[:-4]
        if not name.startswith("ort_"):
            feed[name] = np.load(f)
    for _ in range(3):
        sess.run(None, feed)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        sess.run(None, feed)
        times.append((time.perf_counter() - t) * 1e3)
    print(f"{np.median(times):.3f} {min(times):.3f}")


if __name__ == "__main__":
    main()
