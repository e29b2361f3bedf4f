#!/usr/bin/env bash
# The quantized CNN fixtures of scripts/ref/qconv_cnn.py (1 × 3 × 64 × 64 input; `qlinear`:
# QLinearConv from quantize_static QOperator, `convinteger`: DynamicQuantizeLinear +
# ConvInteger from quantize_dynamic): `rlx bench` on the CPU against onnxruntime (CPU EP,
# default threads) on the same files and input, onnxruntime timed right after RLX on each
# model (scripts/ref/ort_time.py) so both see the same machine load; the last column is each
# engine's fastest run.
# Usage: RLX_BIN=target/release/rlx ITERS=200 scripts/bench/qconv_cnn.sh
# Needs python3 with numpy, onnx and onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${RLX_BIN:-target/release/rlx}
iters=${ITERS:-200}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| model | RLX ms | ORT ms | RLX ÷ ORT | min RLX / ORT ms |"
echo "|---|---|---|---|---|"
for m in qlinear convinteger; do
  d=$out/$m
  mkdir -p "$d/npy"
  cp "crates/rlx-onnx/tests/fixtures/qconv/$m/model.onnx" "$d/"
  python3 -c "import numpy as n,sys; n.save(sys.argv[1], n.random.default_rng(0).uniform(-1,1,(1,3,64,64)).astype(n.float32))" "$d/npy/x.npy"
  read -r ms rmin < <("$bin" bench "$d/model.onnx" --device cpu --input "x=$d/npy/x.npy" --warmup 10 --iters "$iters" --json |
    python3 -c "import json,sys; j=json.load(sys.stdin); print(f\"{j['median_ms']:.3f} {j.get('min_ms', float('nan')):.3f}\")")
  read -r ort omin < <(python3 scripts/ref/ort_time.py "$d" "$iters")
  ratio=$(python3 -c "print(f'{$ms/$ort:.2f}')")
  echo "| $m | $ms | $ort | ${ratio}× | $rmin / $omin |"
done
