#!/usr/bin/env bash
# Builds (here, in release mode) what the wgpu backend runs on the GPU machine and copies it,
# stripped, into .gpu/: the rlx-wgpu test binaries, the bench_wgpu example, the PyTorch peer
# script and run-wgpu.sh; makes sure .gl/ holds the Vulkan loader packages (the GPU machine
# has the NVIDIA Vulkan ICD but no loader). Then, on the GPU machine (carry .gl and .gpu):
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .gpu/run-wgpu.sh
#   CARGO_TARGET_DIR=/work/target-wgpu scripts/gpu/stage-wgpu.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd); cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
if ! ls .gl/*.deb >/dev/null 2>&1; then
  # The loader packages, as ../shared/gpu/prepare.sh fetches them.
  mkdir -p .gl /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update >/dev/null
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 2>&1 | grep -v '^W:' || true)
fi
rm -rf .gpu; mkdir -p .gpu/tests
cargo test --release -p rlx-wgpu --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])' | while read -r exe; do cp "$exe" .gpu/tests/; done
cargo build --release -p rlx-wgpu --example bench_wgpu
cp "$target/release/examples/bench_wgpu" .gpu/
if [ -x "$target/release/rlx" ] && [ "${RLX_STAGE_CLI:-0}" = 1 ]; then cp "$target/release/rlx" .gpu/; fi
cp scripts/bench/encoder_torch.py scripts/gpu/run-wgpu.sh .gpu/
strip .gpu/tests/* .gpu/bench_* .gpu/rlx 2>/dev/null || true
du -sh .gl .gpu; ls -la .gpu .gpu/tests
