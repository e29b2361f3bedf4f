#!/usr/bin/env bash
# Runs on the GPU machine, from the checkout root, after scripts/gpu/stage-interop.sh staged
# .gpu/ (and .gl/ was unpacked: `for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig`): the
# zero-copy and Vulkan export tests, then the hand-off benchmark (one JSON line per size).
# Logs, summary.txt and handoff.jsonl go to $OUT.
set -u
out=${OUT:-/tmp/gpu-out}; mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
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
  run "test-$(basename "$t" | sed 's/-[0-9a-f]*$//')" 120 "$t" --test-threads=1 --nocapture
done
run zero_copy_handoff 300 .gpu/zero_copy_handoff
grep -h '^{' "$out/zero_copy_handoff.log" > "$out/handoff.jsonl" 2>/dev/null
cat "$out/handoff.jsonl"
