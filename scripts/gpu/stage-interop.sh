#!/usr/bin/env bash
# Builds (here, in release mode) what CUDA↔Vulkan zero-copy runs on the GPU machine and copies
# it, stripped, into .gpu/: the zero-copy test (crates/rlx-interop/tests/zero_copy.rs), the
# Vulkan export test (crates/rlx-wgpu/tests/interop.rs), the zero_copy_handoff example and
# run-interop.sh; makes sure .gl/ holds the Vulkan loader packages. Then, on the GPU machine
# (carry .gl and .gpu):
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .gpu/run-interop.sh
#   CARGO_TARGET_DIR=/work/target-zerocopy scripts/gpu/stage-interop.sh
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
cargo test --release -p rlx-interop -p rlx-wgpu --test zero_copy --test interop --no-run \
  --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])' | while read -r exe; do cp "$exe" .gpu/tests/; done
cargo build --release -p rlx-interop --example zero_copy_handoff
cp "$target/release/examples/zero_copy_handoff" scripts/gpu/run-interop.sh .gpu/
strip .gpu/tests/* .gpu/zero_copy_handoff 2>/dev/null || true
du -sh .gl .gpu; ls -la .gpu .gpu/tests
