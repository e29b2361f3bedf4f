#!/usr/bin/env bash
# Runs every check CI runs: formatting, clippy, the workspace tests, the ONNX conformance
# suite and the Python package (wheel + pytest), then prints one
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

echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

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
py_passed=0 py_failed=0 py_skipped=0
py_skip_log=$(mktemp)
py_log=$(mktemp)
py_env=$(mktemp -d)
trap 'rm -f "$skip_log" "$log" "$py_skip_log" "$py_log"; rm -rf "$py_env"' EXIT
py_skip() {
  echo "SKIPPED: $1"
  echo "python package: $1" >>"$skip_log"
  py_skipped=$((py_skipped + 1))
}
py_t0=$(date +%s)
if ! command -v python3 >/dev/null; then
  py_skip "python3 not found: the Python package is not tested"
elif ! python3 -m venv --system-site-packages "$py_env/venv" >/dev/null 2>&1; then
  py_skip "python3 -m venv failed (install python3-venv): the Python package is not tested"
elif ! "$py_env/venv/bin/python" -m pip install -q "maturin>=1.9.4,<2" pytest >/dev/null 2>&1; then
  py_skip "pip could not install maturin and pytest (offline?): the Python package is not tested"
else
  # The venv sees the machine's numpy/onnx/onnxruntime (tests that need one that is absent
  # report SKIPPED); rlx itself comes only from the wheel built here. The dev profile and
  # target dir of `cargo test` above: only rlx-python and pyo3 compile anew.
  set +e
  (
    . "$py_env/venv/bin/activate"
    { maturin build --profile dev --interpreter python --out "$py_env/wheel" >"$py_env/build.log" 2>&1 ||
      { tail -n 40 "$py_env/build.log"; false; }; } &&
      tail -n 2 "$py_env/build.log" &&
      pip install -q --no-deps --force-reinstall "$py_env"/wheel/rlx-*.whl &&
      cd "$py_env" &&
      RLX_PY_SKIP_LOG="$py_skip_log" RLX_MODELS_DIR="$OLDPWD/models" \
        python -m pytest -q -rs -p no:cacheprovider "$OLDPWD/python/tests"
  ) 2>&1 | tee "$py_log"
  py_status=${PIPESTATUS[0]}
  set -e
  py_passed=$(grep -Eo '[0-9]+ passed' "$py_log" | tail -n 1 | grep -Eo '[0-9]+' || echo 0)
  py_failed=$(grep -Eo '[0-9]+ (failed|error)' "$py_log" | awk '{ s += $1 } END { print s + 0 }')
  py_skipped=$(grep -Eo '[0-9]+ skipped' "$py_log" | tail -n 1 | grep -Eo '[0-9]+' || echo 0)
  sed 's/^/python: /' "$py_skip_log" | sort -u >>"$skip_log"
  if [ "$py_status" -ne 0 ] || [ "$py_failed" -ne 0 ]; then
    echo "Python package FAILED (wheel build, install or pytest)"
    [ "$py_failed" -ne 0 ] || py_failed=1
    status=1
  fi
fi
echo "Python package step: $(($(date +%s) - py_t0)) s"

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
