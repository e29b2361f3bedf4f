#!/usr/bin/env bash
# Installs NVRTC from PyPI so that CI compile-checks every generated CUDA kernel without a
# GPU, then prints the line that puts it on the loader path. Use:
#   eval "$(scripts/ci-cuda-setup.sh)"
# Tests that need NVRTC print `SKIPPED: <reason>` when this was not done.
set -euo pipefail
python3 -m pip install --quiet --disable-pip-version-check nvidia-cuda-nvrtc==13.0.88 >&2
lib=$(python3 -c 'import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')
test -e "$lib/libnvrtc.so.13" || { echo "libnvrtc.so.13 not found under $lib" >&2; exit 1; }
echo "export LD_LIBRARY_PATH=$lib:\${LD_LIBRARY_PATH:-}"
