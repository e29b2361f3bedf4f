#!/usr/bin/env bash
# Builds (here, release) what the LLM checks run on the GPU machine and copies it, stripped,
# into .gpu/: the rlx binary, rlx-cuda-llm's test binaries, the transformers peers and the
# SmolLM2 and MiniLM tokenizer.json files (from models/, filled by scripts/fetch-models.sh). Then, on
# the GPU machine: bash .gpu/run-llm.sh [tests] [parity] [small] [8b] (see that file).
# The peers (make_llm.py, peer_llm.py) come from the shared folder; set RLX_SHARED to it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd); cd "$root"
shared=${RLX_SHARED:-$root/../shared}
target=${CARGO_TARGET_DIR:-$root/target}
rm -rf .gpu; mkdir -p .gpu/tests
cargo test --release -p rlx-cuda-llm --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])' | while read -r exe; do cp "$exe" .gpu/tests/; done
# STAGE_EXTRA: more test binaries for run-llm.sh's `extra` part, ';'-separated cargo test
# arguments (e.g. "-p rlx-cuda --test managed; -p rlx-interop --test zero_copy")
IFS=';' read -ra extra <<< "${STAGE_EXTRA:-}"
for spec in "${extra[@]}"; do
  [ -n "${spec// }" ] || continue
  mkdir -p .gpu/cuda-tests
  # shellcheck disable=SC2086
  cargo test --release $spec --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])' | while read -r exe; do cp "$exe" .gpu/cuda-tests/; done
done
# STAGE_EXAMPLES: "package:example" pairs (space-separated) copied to .gpu/ for the `examples` part
for pe in ${STAGE_EXAMPLES:-}; do
  cargo build --release -p "${pe%%:*}" --example "${pe##*:}"
  cp "$target/release/examples/${pe##*:}" .gpu/
  strip ".gpu/${pe##*:}"; gzip -9 ".gpu/${pe##*:}"
  echo "${pe##*:}" >> .gpu/examples.txt
done
# STAGE_PYTHON=1: the Python package's wheel (release, CUDA in), pytest's wheels and
# python/tests, for run-llm.sh's `python` part (DLPack with PyTorch's CUDA tensors)
if [ "${STAGE_PYTHON:-0}" = 1 ]; then
  venv=${STAGE_VENV:-/tmp/rlx-stage-venv}
  [ -x "$venv/bin/maturin" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q "maturin>=1.9.4,<2"; }
  mkdir -p .gpu/wheels
  "$venv/bin/maturin" build --release --strip --out .gpu/wheels
  # numpy and onnx too: the machine's python lacks them (onnx builds the tests' models)
  "$venv/bin/pip" download -q --only-binary=:all: --python-version 3.12 -d .gpu/wheels pytest numpy onnx
  cp -r python/tests .gpu/pytests
fi
cargo build --release -p rlx
cargo build --release -p rlx-cuda-llm --example decode_split
cp "$target/release/rlx" "$target/release/examples/decode_split" .gpu/
cp scripts/gpu/run-llm.sh scripts/gpu/llm_parity.py scripts/gpu/peer_embed.py scripts/gpu/make_llm_1b.py .gpu/
cp "$shared/gpu/peers/make_llm.py" "$shared/gpu/peers/peer_llm.py" .gpu/
cp "$shared/gpu/peers/make_bert.py" "$shared/gpu/peers/peer_bert.py" .gpu/
# the zoo's models travel with the tracked tree (crates/rlx/tests/zoo); the onnx wheel's
# light CNNs are made here (the GPU machine has no onnx package)
cp scripts/zoo/zoo.py .gpu/; python3 scripts/onnx-light.py .gpu/light
cp models/smollm2-hf/tokenizer.json .gpu/tokenizer.json
cp models/minilm/tokenizer.json .gpu/bert-tokenizer.json
strip .gpu/tests/* .gpu/cuda-tests/* .gpu/rlx .gpu/decode_split 2>/dev/null || true
# compressed, so the carried tree stays under the device tool's 64 MiB (run-llm.sh unpacks them)
gzip -9 .gpu/tests/* .gpu/rlx .gpu/decode_split
[ -d .gpu/cuda-tests ] && gzip -9 .gpu/cuda-tests/*
du -sh .gpu; ls -la .gpu .gpu/tests
