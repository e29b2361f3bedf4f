#!/usr/bin/env bash
# SmolLM2-135M (GGUF Q4_1) decode speed on the CPU at 1 and 2 threads, the read bandwidth
# measured in the same run, and peak RSS. Usage (from the repo root, after
# `cargo build --release -p rlx --no-default-features --features cpu`):
#   scripts/bench/smollm2-cpu.sh [path/to/rlx] [runs]
set -euo pipefail
RLX=${1:-${CARGO_TARGET_DIR:-target}/release/rlx}
RUNS=${2:-3}
MODEL=models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT="Once upon a time, there was a"
gcc -O3 -march=native -fopenmp scripts/bench/membw.c -o /tmp/rlx-membw
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) | $(nproc) cores | load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model file bytes: $(stat -c %s "$MODEL")"
/tmp/rlx-membw 2
for t in 1 2; do
  for r in $(seq "$RUNS"); do
    RAYON_NUM_THREADS=$t /usr/bin/time -v "$RLX" generate "$PROMPT" --model "$MODEL" \
      --max-tokens 64 --json 2>/tmp/rlx-time.txt | python3 -c "
import json, sys
j = json.load(sys.stdin); t = j['timings']
print(f\"threads=$t run=$r prefill_tok_s={t['prefill_tok_s']:.1f} decode_tok_s={t['decode_tok_s']:.1f} decode_steps={t['decode_steps']} weight_bytes={j['weight_bytes']} kv_cache_bytes={j['kv_cache_bytes']}\")"
    grep "Maximum resident" /tmp/rlx-time.txt
  done
done
/tmp/rlx-membw 2
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
