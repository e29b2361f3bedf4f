#!/usr/bin/env bash
# Runs on the GPU machine, from the checkout root, after scripts/gpu/stage-cuda.sh staged
# .gpu/ here: checks and measures the A prologue (`CudaOptions::a_prologue`, the FFN's
# bias + GELU applied to the second GEMM's A inside the GEMM + layer norm kernel), which is
# off by default until this has run. Logs go to $OUT:
#   tests.log   the GPU tests of the fused GEMM + norm kernels, with and without the map
#   tune-*.log  every candidate's compile-time timing (RLX_CUDA_TUNE_LOG=1) at batch 32 / 256
#   profile-forced.log  each step alone with the fused kernels forced (tiling 2: 64-row blocks)
#   ab.log      the encoder at batch 256, the option off and on alternating: three rounds of
#               100 runs after 20 (the issue's protocol), then one of 1000 after 100 each
set -u
out=${OUT:-/tmp/gpu-out}; mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export RLX_CUDA_CACHE=/tmp/rlx-cuda-cache
gpu=$(ls .gpu/tests/gpu-* 2>/dev/null | head -1)
if [ -n "$gpu" ]; then
  timeout 300 "$gpu" --test-threads=1 --nocapture gemm_norm_kernels > "$out/tests.log" 2>&1
  echo "tests: rc=$? $(grep -E '^test result:' "$out/tests.log")"
else
  echo "tests: no gpu test binary in .gpu/tests"
fi
for b in 32 256; do
  RLX_CUDA_A_PROLOGUE=1 RLX_CUDA_TUNE_LOG=1 timeout 200 .gpu/bench_encoder --batches $b \
    --iters 20 --warmup 5 > "$out/tune-$b.log" 2>&1
  echo "tune $b: rc=$? $(grep -c 'on A mapped' "$out/tune-$b.log") mapped candidates timed"
done
RLX_CUDA_A_PROLOGUE=1 RLX_CUDA_FUSED_GEMM=force:2 timeout 200 .gpu/bench_encoder --batches 256 \
  --iters 20 --warmup 5 --profile > "$out/profile-forced.log" 2>&1
echo "profile (mapped kernel forced, 64-row tiling): rc=$?"; grep -E 'ms  ' "$out/profile-forced.log" | head -9
: > "$out/ab.log"
# one encoder reading at batch 256 with the option at $1, $2 runs after $3 warm-up ($4 names it)
reading() {
  nvidia-smi --query-gpu=temperature.gpu,power.draw,clocks.sm --format=csv,noheader >> "$out/ab.log"
  echo "## $4 A_PROLOGUE=$1 ($2 after $3)" >> "$out/ab.log"
  RLX_CUDA_A_PROLOGUE=$1 timeout 200 .gpu/bench_encoder --batches 256 --iters "$2" --warmup "$3" \
    2>&1 | grep -E '^encoder' >> "$out/ab.log"
}
for round in 1 2 3; do for v in 0 1; do reading $v 100 20 "round $round"; done; done
for v in 0 1; do reading $v 1000 100 sustained; done
cat "$out/ab.log"
