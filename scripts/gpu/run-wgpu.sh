#!/usr/bin/env bash
# Runs on the GPU machine, from the checkout root, after scripts/gpu/stage-wgpu.sh staged
# .gpu/ (and .gl/ was unpacked: `for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig`):
# every rlx-wgpu test binary on Vulkan (200 random graphs; wgpu's GL backend is known
# broken on that machine, so the opengl tests are skipped by name), the wgpu benchmarks
# (SGEMM 4096³, f16 GEMM, elementwise chain vs a wgpu copy, the MiniLM-shaped encoder at
# batch 32) and the PyTorch peer for the encoder and copies. Logs and summary.txt go to $OUT.
set -u
out=${OUT:-/tmp/gpu-out}; mkdir -p "$out"
nvidia-smi > "$out/gpu.txt" 2>&1
export RLX_DIFF_GRAPHS=${RLX_DIFF_GRAPHS:-200}
run() { # name timeout command...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  if timeout "$limit" "$@" > "$out/$name.log" 2>&1; then s=ok; else s="FAILED(rc=$?)"; fi
  printf '%s: %s %ss %s\n' "$name" "$s" "$((SECONDS - start))" \
    "$(grep -E '^test result:|SKIPPED' "$out/$name.log" | tail -1)" | tee -a "$out/summary.txt"
}
for t in .gpu/tests/*; do
  [ -x "$t" ] || continue
  run "test-$(basename "$t" | sed 's/-[0-9a-f]*$//')" 150 "$t" --test-threads=1 --nocapture --skip opengl
done
bench=(.gpu/bench_wgpu --device vulkan --size 4096 --elems 268435456 --batch 32 --iters 20 --warmup 3 --reps 10 --only sgemm,hgemm,ew,ew16,encoder)
run bench_wgpu 150 "${bench[@]}"
# The same with f16 arithmetic, subgroups and vec4 off, then with wgpu's bounds checks on.
RLX_WGPU_NO_F16=1 RLX_WGPU_NO_SUBGROUPS=1 RLX_WGPU_NO_VEC4=1 run bench_wgpu_paths_off 150 "${bench[@]}"
RLX_WGPU_CHECKED=1 run bench_wgpu_checked 150 "${bench[@]}"
run torch_peer 150 python3 .gpu/encoder_torch.py --batches 32 --gemm --copy
grep -hE '^(device|gemm|elementwise|encoder|torch|rlx)' "$out"/bench_*.log "$out"/torch_*.log > "$out/bench.txt" 2>/dev/null
cat "$out/bench.txt"
