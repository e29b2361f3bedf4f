#!/usr/bin/env python3
"""bf16 accuracy of MiniLM's hidden states on the CPU: RLX (`rlx run --precision bf16`, AMX
where the CPU has it) and OpenVINO (INFERENCE_PRECISION_HINT=bf16), both against a float64
numpy-free reference: ONNX Runtime f32 on the same fp32 ONNX, random token ids, batch 8 x
128. Prints max abs error and relative L2 of `last_hidden_state` per engine.

Usage: minilm_bf16_accuracy.py RLX_BIN MODEL.onnx WORKDIR
"""
import os
import subprocess
import sys

import numpy as np


def main():
    rlx, onnx_path, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(7)
    b, s = 8, 128
    ids = rng.integers(1000, 30000, size=(b, s), dtype=np.int64)
    mask = np.ones((b, s), dtype=np.int64)
    mask[1, 100:] = 0  # one padded row
    np.save(f"{work}/input_ids.npy", ids)
    np.save(f"{work}/attention_mask.npy", mask)
    feed = {"input_ids": ids, "attention_mask": mask}
    # a copy with static input shapes (RLX's ONNX import wants CumSum's dims known)
    import onnx
    model = onnx.load(onnx_path)
    for inp in model.graph.input:
        dims = inp.type.tensor_type.shape.dim
        dims[0].dim_value, dims[1].dim_value = b, s
    static = f"{work}/minilm-static.onnx"
    onnx.save(model, static)

    import onnxruntime as rt
    so = rt.SessionOptions()
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = rt.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    ref = ref.astype(np.float64)

    def report(name, got):
        got = np.asarray(got, dtype=np.float64)
        err = np.abs(got - ref)
        rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        print(f"{name:32s} max abs {err.max():.4f}  mean abs {err.mean():.5f}  relative L2 {rel:.2e}")

    for prec in ["f32", "bf16"]:
        out = f"{work}/rlx-{prec}"
        subprocess.run([rlx, "run", static, "--device", "cpu", "--precision", prec,
                        "--input", f"input_ids={work}/input_ids.npy",
                        "--input", f"attention_mask={work}/attention_mask.npy",
                        "--output", out], check=True, stdout=subprocess.DEVNULL)
        name = sorted(os.listdir(out))[0]
        report(f"RLX {prec}", np.load(f"{out}/{name}"))

    import openvino as ov
    core = ov.Core()
    for prec in ["f32", "bf16"]:
        m = core.read_model(onnx_path)
        m.reshape({"input_ids": [b, s], "attention_mask": [b, s]})
        c = core.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": prec, "INFERENCE_NUM_THREADS": 2})
        report(f"OpenVINO {prec}", c.create_infer_request().infer(feed)[c.outputs[0]])


if __name__ == "__main__":
    main()
