#!/usr/bin/env bash
# Seeds the fuzz corpus with small valid models from the generated node tests.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p corpus/onnx_loader
for m in ../onnx-tests/node/*/model.onnx; do
  [ "$(stat -c %s "$m")" -lt 4096 ] && cp "$m" "corpus/onnx_loader/$(basename "$(dirname "$m")").onnx"
done
echo "$(ls corpus/onnx_loader | wc -l) seeds"
