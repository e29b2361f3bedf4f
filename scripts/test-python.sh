#!/usr/bin/env bash
# The Python package's check, run by scripts/test.sh after `cargo test`: builds the wheel
# with maturin (dev profile, same target dir, so it reuses the test build's artifacts and
# compiles only pyo3, numpy and crates/rlx-python), installs it into a fresh virtual
# environment and runs python/tests with pytest. A missing python3, venv or pip (offline)
# is reported as `SKIPPED: <reason>`. Skip reasons go to $RLX_SKIP_LOG prefixed `python`.
# The last line is always `python: P passed, F failed, S skipped`; exit 1 on a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
skip_log=${RLX_SKIP_LOG:-/dev/null}
env_dir=$(mktemp -d)
trap 'rm -rf "$env_dir"' EXIT
t0=$(date +%s)

finish() { # passed failed skipped status
  echo "Python package step: $(($(date +%s) - t0)) s"
  echo "python: $1 passed, $2 failed, $3 skipped"
  exit "$4"
}
skip() {
  echo "SKIPPED: $1"
  echo "python package: $1" >>"$skip_log"
  finish 0 0 1 0
}

command -v python3 >/dev/null || skip "python3 not found: the Python package is not tested"
# --system-site-packages: the machine's numpy/onnx/onnxruntime/tokenizers serve the tests
# (a test whose package is absent says SKIPPED); rlx itself comes only from the wheel.
python3 -m venv --system-site-packages "$env_dir/venv" >/dev/null 2>&1 ||
  skip "python3 -m venv failed (install python3-venv): the Python package is not tested"
py=$env_dir/venv/bin/python
"$py" -m pip install -q "maturin>=1.9.4,<2" pytest >"$env_dir/pip.log" 2>&1 ||
  skip "pip could not install maturin and pytest (offline?): the Python package is not tested"
"$py" -c 'import numpy' 2>/dev/null || "$py" -m pip install -q numpy >/dev/null 2>&1 ||
  skip "numpy is not installed and pip could not install it: the Python package is not tested"

echo "building the wheel (maturin build --profile dev)"
if ! "$env_dir/venv/bin/maturin" build --profile dev --interpreter "$py" --out "$env_dir/wheel" \
  >"$env_dir/build.log" 2>&1; then
  tail -n 40 "$env_dir/build.log"
  echo "Python package FAILED: the wheel did not build"
  finish 0 1 0 1
fi
grep -E 'Finished|Built wheel' "$env_dir/build.log"
if ! "$py" -m pip install -q --no-deps --force-reinstall "$env_dir"/wheel/rlx-*.whl; then
  echo "Python package FAILED: the wheel did not install"
  finish 0 1 0 1
fi

# from a folder without python/rlx, so `import rlx` is the installed wheel
cd "$env_dir"
RLX_PY_SKIP_LOG="$env_dir/skips" RLX_MODELS_DIR="$root/models" \
  "$py" -m pytest -q -rs -p no:cacheprovider "$root/python/tests" 2>&1 | tee "$env_dir/pytest.log"
status=${PIPESTATUS[0]}
count() { grep -Eo "[0-9]+ $1" "$env_dir/pytest.log" | tail -n 1 | grep -Eo '[0-9]+' || echo 0; }
passed=$(count passed)
failed=$(($(count failed) + $(count error)))
skipped=$(count skipped)
[ -f "$env_dir/skips" ] && sort -u "$env_dir/skips" | sed 's/^/python: /' >>"$skip_log"
if [ "$status" -ne 0 ]; then
  echo "Python package FAILED (pytest exit $status)"
  [ "$failed" -gt 0 ] || failed=1
  finish "$passed" "$failed" "$skipped" 1
fi
finish "$passed" "$failed" "$skipped" 0
