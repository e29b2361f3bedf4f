#!/usr/bin/env bash
# Runs on the GPU machine, from the checkout root, after scripts/gpu/stage-cuda.sh staged
# .gpu/ here: every rlx-cuda test binary (one at a time), the micro benchmarks with the
# PyTorch peer, the encoder benchmark with the PyTorch peer on the same weights, and the
# bundled demo when the rlx binary was staged. Logs and summary.txt go to $OUT.
set -u
out=${OUT:-/tmp/gpu-out}; mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export RLX_CUDA_CACHE=/tmp/rlx-cuda-cache
nvidia-smi > "$out/gpu.txt" 2>&1
run() { # name timeout command...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  if timeout "$limit" "$@" > "$out/$name.log" 2>&1; then s=ok; else s="FAILED(rc=$?)"; fi
  printf '%s: %s %ss %s\n' "$name" "$s" "$((SECONDS - start))" \
    "$(grep -E '^test result:|SKIPPED' "$out/$name.log" | tail -1)" | tee -a "$out/summary.txt"
}
for t in .gpu/tests/*; do
  [ -x "$t" ] || continue
  run "test-$(basename "$t" | sed 's/-[0-9a-f]*$//')" 240 "$t" --test-threads=1 --nocapture
done
run bench_micro 150 .gpu/bench_micro
# host runs against bound runs (device buffers in and out; in place, then copied)
[ -x .gpu/bound_runs ] && run bound_runs 60 .gpu/bound_runs cuda 32 500
[ -x .gpu/bound_runs ] && RLX_CUDA_BIND_DIRECT=0 run bound_runs_copied 60 .gpu/bound_runs cuda 32 500
run torch_micro 120 python3 .gpu/encoder_torch.py --no-encoder --gemm --copy
run bench_encoder 150 .gpu/bench_encoder --dump /tmp/rlx-encoder
[ -x .gpu/rlx ] && run demo 60 .gpu/rlx run --device cuda
ls .gpu/traces/*.jsonl.gz >/dev/null 2>&1 && run replay_cuda 300 .gpu/replay_cuda .gpu/traces/*.jsonl.gz
run torch_encoder 300 python3 .gpu/encoder_torch.py --weights /tmp/rlx-encoder
grep -hE '^(rlx|device|alloc|encoder|torch|cuda replay|cuda, batch)' "$out"/bench_*.log "$out"/bound_runs*.log "$out"/torch_*.log "$out"/replay_*.log > "$out/bench.txt" 2>/dev/null
cat "$out/bench.txt"
