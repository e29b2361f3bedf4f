#!/usr/bin/env bash
# rlx serve against llama.cpp's server (from the llama-cpp-python package) on the CPU, same
# GGUF file, same threads, same load, one after the other in this one command:
#   scripts/bench-serve-cpu.sh [MODEL.gguf] [STREAMS] [REQUESTS] [MAX_TOKENS]
# Needs a release rlx (cargo build --release -p rlx) and `pip install 'llama-cpp-python[server]'`.
# llama-cpp-python serves one request at a time; --interrupt_requests False makes it queue the
# others instead of cutting the running stream. Prints one JSON line per server (rlx loadtest's report) and the throughput ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
streams=${2:-8}; requests=${3:-32}; max_tokens=${4:-64}
threads=${THREADS:-$(nproc)}
rlx=${RLX_BIN:-${CARGO_TARGET_DIR:-target}/release/rlx}
wait_up() { python3 - "$1" <<'PY'
import sys, time, urllib.request
for _ in range(600):
    try:
        urllib.request.urlopen(sys.argv[1], timeout=1); sys.exit(0)
    except Exception: time.sleep(0.2)
sys.exit(1)
PY
}
load() { "$rlx" loadtest --url "$1" --streams "$streams" --requests "$requests" \
  --max-tokens "$max_tokens" --model m --json | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))'; }

"$rlx" serve --model "$model" --device cpu --threads "$threads" --max-sequences "$streams" \
  --context 1024 --port 8093 2>/tmp/rlx-serve.log &
pid=$!
wait_up http://127.0.0.1:8093/health
ours=$(load http://127.0.0.1:8093); kill $pid; wait $pid 2>/dev/null || true
echo "rlx       $ours"

python3 -m llama_cpp.server --model "$model" --n_threads "$threads" --n_ctx 2048 --interrupt_requests False \
  --port 8094 >/tmp/llama-server.log 2>&1 &
pid=$!
wait_up http://127.0.0.1:8094/v1/models
peer=$(load http://127.0.0.1:8094); kill $pid; wait $pid 2>/dev/null || true
echo "llama.cpp $peer"
python3 - "$ours" "$peer" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"throughput rlx/llama.cpp: {a['tok_s'] / max(b['tok_s'], 1e-9):.2f}x "
      f"({a['tok_s']:.1f} vs {b['tok_s']:.1f} tok/s); ttft p50 {a['ttft_p50_ms']:.0f} vs {b['ttft_p50_ms']:.0f} ms")
PY
