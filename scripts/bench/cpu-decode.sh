#!/usr/bin/env bash
# Batch-1 greedy decode speed of a GGUF model on the CPU: RLX (`rlx generate`) against
# llama.cpp (llama-cpp-python), same threads, alternating in one run; medians.
# Usage (from the repo root, after `cargo build --release -p rlx`):
#   scripts/bench/cpu-decode.sh MODEL.gguf [runs=5] [threads=2] [path/to/rlx]
set -euo pipefail
MODEL=${1:?usage: cpu-decode.sh MODEL.gguf [runs] [threads] [rlx]}
RUNS=${2:-5}
THREADS=${3:-2}
RLX=${4:-${CARGO_TARGET_DIR:-target}/release/rlx}
PROMPT="The capital of France is"
HERE=$(dirname "$0")
echo "machine: $(lscpu | sed -n 's/^Model name: *//p') | $(nproc) cores | load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ) | model: $MODEL | threads: $THREADS | prompt: \"$PROMPT\", 65 tokens"
rlx_runs=()
peer_runs=()
for r in $(seq "$RUNS"); do
  rlx=$(RLX_CPU_THREADS=$THREADS "$RLX" generate "$PROMPT" --model "$MODEL" --device cpu \
    --threads "$THREADS" --max-tokens 65 --ignore-eos --json |
    python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["timings"]["decode_tok_s"])')
  peer=$(python3 "$HERE/cpu_decode_llamacpp.py" "$MODEL" "$THREADS" "$PROMPT" |
    python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["decode_tok_s"])')
  echo "run $r: rlx $rlx tok/s | llama.cpp $peer tok/s"
  rlx_runs+=("$rlx")
  peer_runs+=("$peer")
done
python3 - "${rlx_runs[*]}" "${peer_runs[*]}" <<'PY'
import statistics as s, sys
r = [float(v) for v in sys.argv[1].split()]
p = [float(v) for v in sys.argv[2].split()]
print(f"median: rlx {s.median(r):.1f} tok/s | llama.cpp {s.median(p):.1f} tok/s | "
      f"ratio {s.median(r) / s.median(p):.2f}x")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
