#!/usr/bin/env bash
# Runs on the GPU machine, from the checkout root, after scripts/gpu/stage-cuda.sh staged
# .gpu/ here: the encoder at one batch with an environment variable taking each of the given
# values in turn, alternating, over the protocol (ROUNDS rounds of 100 runs after 20,
# default 3), then SUSTAINED runs after 100 (default 1000; 0 skips) for the first and the last
# value, sampling the SM clock, power and throttle reasons every 50 ms while they run.
#   bash scripts/gpu/ab-env.sh RLX_CUDA_WALK_BACK "0 -" [batch]   (- leaves it unset)
# Writes $OUT/ab-<variable>.log (the readings) and $OUT/smi-<variable>.csv (the samples).
set -u
var=$1; values=$2; batch=${3:-256}
out=${OUT:-/tmp/gpu-out}; mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export RLX_CUDA_CACHE=/tmp/rlx-cuda-cache
log=$out/ab-$var.log; smi=$out/smi-$var.csv
: > "$log"; : > "$smi"
# one encoder reading with $var at $1, $2 runs after $3 warm-up ($4 names it)
reading() {
  nvidia-smi --query-gpu=temperature.gpu,power.draw,clocks.sm --format=csv,noheader >> "$log"
  echo "## $4 $var=$1 ($2 after $3)" >> "$log"
  if [ "$1" = - ]; then unset "$var"; else export "$var=$1"; fi
  timeout 300 .gpu/bench_encoder --batches "$batch" --iters "$2" --warmup "$3" 2>&1 \
    | grep -E '^encoder' >> "$log"
  unset "$var"
}
for round in $(seq "${ROUNDS:-3}"); do for v in $values; do reading "$v" 100 20 "round $round"; done; done
sustained=${SUSTAINED:-1000}
if [ "$sustained" != 0 ]; then
  set -- $values; first=$1; last=${!#}
  for v in "$first" "$last"; do
    echo "## sustained $var=$v" >> "$smi"
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
      --format=csv,noheader -lms 50 >> "$smi" & pid=$!
    reading "$v" "$sustained" 100 sustained
    kill $pid 2>/dev/null; wait $pid 2>/dev/null
  done
fi
cat "$log"
