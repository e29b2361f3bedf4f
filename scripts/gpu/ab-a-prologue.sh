#!/usr/bin/env bash
# Runs on the GPU machine, from the checkout root, after scripts/gpu/stage-cuda.sh staged
# .gpu/ here: checks and measures the A prologue (`CudaOptions::a_prologue`, the FFN's
# bias + GELU applied to the second GEMM's A inside the GEMM + layer norm kernel), which is
# off by default (session 21 measured it slower). Logs go to $OUT:
#   tests.log   the GPU tests of the fused GEMM + norm kernels, with and without the map
#   tune-*.log  every candidate's compile-time timing (RLX_CUDA_TUNE_LOG=1) at batch 32 / 256
#   profile-forced.log  each step alone with the fused kernels forced (tiling 2: 64-row blocks)
#   ab-RLX_CUDA_A_PROLOGUE.log  the encoder at batch 256, the option off and on alternating
#               (scripts/gpu/ab-env.sh: three rounds of 100 runs after 20, the issue's protocol,
#               then 1000 after 100 each, with smi-RLX_CUDA_A_PROLOGUE.csv sampled meanwhile)
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
# the encoder at batch 256 with the option off and on, alternating (ab-env.sh)
bash "$(dirname "$0")/ab-env.sh" RLX_CUDA_A_PROLOGUE "0 1" 256
