#!/usr/bin/env bash
# Runs every check CI runs: formatting, clippy, rustdoc warnings, the workspace tests, the
# ONNX conformance suite and the Python package (wheel + pytest), then prints one
# summary line where tests that printed `SKIPPED: <reason>` count as skipped, not passed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== BENCHMARKS.md tables match their specs (bench/tables/*.json)"
python3 scripts/bench/render.py --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

# After clippy the dependencies are already checked: this documents the workspace crates
# alone (about 15 s on 2 cores), failing on broken intra-doc links and the like.
echo "== cargo doc (rustdoc warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

echo "== NVRTC for compile-checking generated CUDA kernels (no GPU needed)"
if setup=$(scripts/ci-cuda-setup.sh); then
  eval "$setup"
else
  echo "NVRTC could not be installed: CUDA compile checks will report SKIPPED"
fi

echo "== real models for the parity tests (cached in models/; offline they report SKIPPED)"
scripts/fetch-models.sh || echo "models could not be fetched: tests that need them will report SKIPPED"
# The MiniLM reference is numpy; Python's tokenizers (when it installs) cross-checks token ids.
python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q numpy >/dev/null 2>&1 || true
python3 -c 'import tokenizers' 2>/dev/null || python3 -m pip install -q tokenizers >/dev/null 2>&1 || true
# The contrib-op tests (crates/rlx/tests/contrib_onnx.rs) compare with onnxruntime.
python3 -c 'import onnx, onnxruntime' 2>/dev/null || python3 -m pip install -q onnx onnxruntime >/dev/null 2>&1 || true

echo "== cargo test"
skip_log=$(mktemp)
log=$(mktemp)
trap 'rm -f "$skip_log" "$log"' EXIT
set +e
RLX_SKIP_LOG="$skip_log" cargo test --workspace --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# The CPU differential suites again on the `gemm` crate path that CPUs without AVX2/FMA
# take (the packed GEMM switched off); same binaries, no second build.
RLX_CPU_PACKED_GEMM=0 RLX_SKIP_LOG="$skip_log" cargo test -p rlx-cpu --no-fail-fast \
  --test fast_vs_interp --test random_kernels 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
set -e

echo
echo "== ONNX conformance (official node tests and the onnx wheel's suites, CPU)"
set +e
# The dev-profile `rlx` that `cargo test` built for the CLI tests: no second build.
bin=${CARGO_TARGET_DIR:-target}/debug/rlx
if [ -x "$bin" ]; then
  RLX_BIN=$bin ./scripts/onnx-conformance.sh
else
  ./scripts/onnx-conformance.sh
fi
onnx_status=$?
set -e
if [ "$onnx_status" -ne 0 ]; then
  echo "ONNX conformance FAILED: a crash, or a test of tests/onnx/expected-pass.txt no longer passes"
  status=1
fi

echo
echo "== Python package (wheel built into a fresh virtual environment, pytest)"
py_log=$(mktemp)
trap 'rm -f "$skip_log" "$log" "$py_log"' EXIT
set +e
RLX_SKIP_LOG="$skip_log" scripts/test-python.sh 2>&1 | tee "$py_log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
set -e
# its last line: `python: P passed, F failed, S skipped`
read -r py_passed py_failed py_skipped < <(tail -n 1 "$py_log" |
  awk '{ print $2 + 0, $4 + 0, $6 + 0 }')

passed=$(awk '/^test result:/ { for (i = 1; i < NF; i++) if ($(i + 1) ~ /^passed/) s += $i } END { print s + 0 }' "$log")
failed=$(awk '/^test result:/ { for (i = 1; i < NF; i++) if ($(i + 1) ~ /^failed/) s += $i } END { print s + 0 }' "$log")
# Python skips are counted by pytest (not among the passed); Rust skips are among cargo's passed
rust_skipped=$(sort -u "$skip_log" | grep -vc '^python' || true)
skipped=$((rust_skipped + py_skipped))
echo
if [ -s "$skip_log" ]; then
  echo "Skipped tests:"
  sort -u "$skip_log" | sed 's/^/  /'
fi
onnx_line=passed
[ "$onnx_status" -eq 0 ] || onnx_line=FAILED
echo "summary: $((${passed:-0} - rust_skipped + py_passed)) passed, $((${failed:-0} + py_failed)) failed, ${skipped} skipped (Python: ${py_passed} passed, ${py_failed} failed, ${py_skipped} skipped); ONNX conformance ${onnx_line}; exit ${status}"
exit "$status"
