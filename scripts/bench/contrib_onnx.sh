#!/usr/bin/env bash
# MiniLM-shaped BERT (6 layers, random weights) as ONNX Runtime's transformer optimizer and
# quantize_dynamic write it (scripts/ref/bert_contrib.py), at batch × 128 for each batch
# given: `rlx run` against onnxruntime's outputs (relative L2 of last_hidden_state) and
# both engines' distance from the f32 model's output, and
# `rlx bench` against onnxruntime's median (CPU EP, default threads) on the same files,
# onnxruntime timed right after RLX on each variant (scripts/ref/ort_time.py) so both see
# the same machine load; the last columns are each engine's fastest run.
# Usage: RLX_BIN=target/release/rlx scripts/bench/contrib_onnx.sh [BATCH...] (default 1 8);
# VARIANTS="optimized_int8 int8_ort" runs only those (default: all five).
# Needs python3 with numpy, onnx and onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${RLX_BIN:-target/release/rlx}
iters=${ITERS:-30}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| variant | contrib ops | batch × seq | rel L2 vs ORT | vs f32 model: RLX / ORT | RLX ms | ORT ms | RLX ÷ ORT | min RLX / ORT ms |"
echo "|---|---|---|---|---|---|---|---|---|"
for b in "${@:-1 8}"; do
  for batch in $b; do
    dir=$out/b$batch
    python3 scripts/ref/bert_contrib.py "$dir" --batch "$batch" --seq 128 >/dev/null 2>&1
    for v in ${VARIANTS:-plain optimized optimized_fastgelu optimized_int8 int8_ort}; do
      d=$dir/$v
      ins=()
      for f in "$d"/npy/*.npy; do
        n=$(basename "$f" .npy)
        [[ $n == ort_* ]] || ins+=(--input "$n=$f")
      done
      "$bin" run "$d/model.onnx" --device cpu "${ins[@]}" --output "$d/rlx" >/dev/null
      err=$(python3 -c "import numpy as n,sys; a=n.load(sys.argv[1]); b=n.load(sys.argv[2]); print(f'{n.linalg.norm(a-b)/n.linalg.norm(a):.1e}')" \
        "$d/npy/ort_last_hidden_state.npy" "$d/rlx/last_hidden_state.npy")
      # both engines' distance from the f32 model's output (ORT on `plain`)
      f32ref=$dir/plain/npy/ort_last_hidden_state.npy
      vsf32=$(python3 -c "import numpy as n,sys; r=n.load(sys.argv[1]); e=lambda p: n.linalg.norm(n.load(p)-r)/n.linalg.norm(r); print(f'{e(sys.argv[2]):.1e} / {e(sys.argv[3]):.1e}')" \
        "$f32ref" "$d/rlx/last_hidden_state.npy" "$d/npy/ort_last_hidden_state.npy")
      read -r ms rmin < <("$bin" bench "$d/model.onnx" --device cpu "${ins[@]}" --warmup 5 --iters "$iters" --json |
        python3 -c "import json,sys; j=json.load(sys.stdin); print(f\"{j['median_ms']:.2f} {j.get('min_ms', float('nan')):.2f}\")")
      read -r ort omin < <(python3 scripts/ref/ort_time.py "$d" "$iters")
      ops=$(grep '^com.microsoft' "$d/ops.txt" | sed 's/com.microsoft://' | paste -sd, - || true)
      ratio=$(python3 -c "print(f'{$ms/$ort:.2f}')")
      echo "| $v | ${ops:-none} | $batch × 128 | $err | $vsf32 | $ms | $ort | ${ratio}× | $rmin / $omin |"
    done
  done
done
