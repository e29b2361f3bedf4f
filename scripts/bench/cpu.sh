#!/usr/bin/env bash
# CPU figures for BENCHMARKS.md, RLX and its peer in one command on one machine:
# SGEMM vs numpy/OpenBLAS, the fused elementwise chain vs memcpy, and the demo end to end.
#   scripts/bench/cpu.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -c 'import numpy, threadpoolctl' 2>/dev/null || python3 -m pip install -q numpy threadpoolctl
cargo build -q --release -p rlx-cpu --example bench_cpu
cargo build -q --release -p rlx
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== rlx-cpu"
"${CARGO_TARGET_DIR:-target}"/release/examples/bench_cpu
echo "== numpy peer (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for this command only)"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 scripts/bench/cpu_numpy.py
echo "== demo end to end"
"${CARGO_TARGET_DIR:-target}"/release/rlx run --device cpu --iters 50
