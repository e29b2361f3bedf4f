#!/usr/bin/env bash
# MiniLM (all-MiniLM-L6-v2, f32) on the CPU: RLX against ONNX Runtime and OpenVINO in one
# run, at batch 1 x 128 and batch 8 x 128 tokens, on the same weights.
#   scripts/bench/minilm.sh [ROUNDS]     (default 2 rounds; the log goes to bench/cpu/)
#   env: WARMUP, ITERS (10, 50), RLX_BIN (skip the cargo build), RLX_SHARED (../shared)
# - RLX: `rlx bench models/minilm --device cpu --dim batch=B,seq=128 [--precision bf16]`
#   (the safetensors folder; graph ends in pooling + L2 norm);
# - peers: the fp32 ONNX that ../shared/bench/build_minilm_onnx.py builds from the same
#   safetensors (last_hidden_state; pooling left out), run by scripts/bench/minilm_peers.py:
#   ONNX Runtime with 2 intra-op threads and all graph optimizations, OpenVINO with f32
#   (and bf16) inference precision and 2 threads.
# Each round runs every engine at both sizes, interleaved; the table takes per engine the
# best median over rounds (the machine is shared and noisy).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-2}
WARMUP=${WARMUP:-10}
ITERS=${ITERS:-50}
SHARED=${RLX_SHARED:-../shared}
PY=${PYTHON:-python3}
TARGET=${CARGO_TARGET_DIR:-target}

scripts/fetch-models.sh minilm
"$PY" -c 'import numpy, onnx, onnxruntime, openvino' 2>/dev/null ||
  "$PY" -m pip install -q numpy onnx onnxruntime openvino
ONNX=models/minilm/minilm-fp32.onnx
if [ ! -s "$ONNX" ]; then
  "$PY" "$SHARED/bench/build_minilm_onnx.py" models/minilm "$ONNX"
fi
if [ -n "${RLX_BIN:-}" ]; then
  RLX=$RLX_BIN  # an already built rlx binary
else
  cargo build -q --release -j2 -p rlx
  RLX="$TARGET/release/rlx"
fi

mkdir -p bench/cpu
log="bench/cpu/minilm-$(date -u +%Y-%m-%d).log"
results=$(mktemp)
trap 'rm -f "$results"' EXIT
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: scripts/bench/minilm.sh $ROUNDS (warmup $WARMUP, iters $ITERS)"
  "$PY" -c 'import onnxruntime as r, openvino as o, numpy as n; print("peers: onnxruntime", r.__version__, "openvino", o.__version__, "numpy", n.__version__)'
  for round in $(seq "$ROUNDS"); do
    for b in 1 8; do
      echo "== round $round, batch $b x 128"
      for prec in f32 bf16; do
        peer=rlx; [ "$prec" = f32 ] || peer="rlx-$prec"
        "$RLX" bench models/minilm --device cpu --dim "batch=$b,seq=128" --precision "$prec" \
          --warmup "$WARMUP" --iters "$ITERS" --json |
          "$PY" -c "import json,sys; r=json.load(sys.stdin); r.update(peer='$peer', batch=$b, seq=128); print(json.dumps(r))" |
          tee -a "$results"
      done
      "$PY" scripts/bench/minilm_peers.py "$ONNX" "$b" 128 "$WARMUP" "$ITERS" ort openvino openvino-bf16 | tee -a "$results"
    done
  done
  echo "== summary (best median over $ROUNDS rounds, ms)"
  "$PY" - "$results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
best = {}
for r in rows:
    if "median_ms" not in r:
        continue
    k = (r["peer"], r["batch"])
    if k not in best or r["median_ms"] < best[k]["median_ms"]:
        best[k] = r
print("| batch x seq | RLX median (p90) | ORT median (p90) | OpenVINO median (p90) | RLX / ORT | RLX / OpenVINO | RLX compile |")
print("|---|---|---|---|---|---|---|")
for b in (1, 8):
    g = lambda p: best.get((p, b))
    rlx, ort, ov = g("rlx"), g("onnxruntime"), g("openvino")
    cell = lambda r: f"{r['median_ms']:.2f} ({r['p90_ms']:.2f})" if r else "n/a"
    ratio = lambda a, c: f"{a['median_ms'] / c['median_ms']:.2f}x" if a and c else "n/a"
    comp = f"{rlx['compile_ms']:.0f} ms" if rlx else "n/a"
    print(f"| {b} x 128 | {cell(rlx)} | {cell(ort)} | {cell(ov)} | {ratio(rlx, ort)} | {ratio(rlx, ov)} | {comp} |")
print()
print("bf16 (RLX: --precision bf16, matmuls by a weight on AMX where the CPU has it; OpenVINO: INFERENCE_PRECISION_HINT=bf16)")
print("| batch x seq | RLX bf16 median (p90) | OpenVINO bf16 median (p90) | RLX / OpenVINO |")
print("|---|---|---|---|")
for b in (1, 8):
    g = lambda p: best.get((p, b))
    rlx, ov = g("rlx-bf16"), g("openvino-bf16")
    print(f"| {b} x 128 | {cell(rlx)} | {cell(ov)} | {ratio(rlx, ov)} |")
EOF
} 2>&1 | tee "$log"
echo "log: $log"
