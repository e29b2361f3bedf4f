#!/usr/bin/env bash
# Builds (here, in release mode) what the CUDA backend runs on the GPU machine and copies it,
# stripped, into .gpu/: the rlx-cuda test binaries (and rlx-runtime's mixed-precision and
# binding tests), the bench examples (and rlx-runtime's bound_runs), the PyTorch peer
# script and run-cuda.sh. Then, on the GPU machine: bash .gpu/run-cuda.sh (see that file).
#   CARGO_TARGET_DIR=/work/target-cuda scripts/gpu/stage-cuda.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd); cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
rm -rf .gpu; mkdir -p .gpu/tests
{ cargo test --release -p rlx-cuda --no-run --message-format=json 2>/dev/null
  cargo test --release -p rlx-runtime --test mixed_precision --no-run --message-format=json 2>/dev/null
  cargo test --release -p rlx-runtime --test binding --no-run --message-format=json 2>/dev/null; } \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])' | while read -r exe; do cp "$exe" .gpu/tests/; done
cargo build --release -p rlx-cuda --examples
cargo build --release -p rlx-runtime --example bound_runs
cp "$target/release/examples/bench_encoder" "$target/release/examples/bench_micro" \
  "$target/release/examples/replay_cuda" "$target/release/examples/bound_runs" .gpu/
# the allocation traces replay_cuda replays on the device
if [ -d ../shared/traces ]; then mkdir -p .gpu/traces && cp ../shared/traces/*.jsonl.gz .gpu/traces/; fi
if [ -x "$target/release/rlx" ] && [ "${RLX_STAGE_CLI:-0}" = 1 ]; then cp "$target/release/rlx" .gpu/; fi
cp scripts/bench/encoder_torch.py scripts/gpu/run-cuda.sh .gpu/
strip .gpu/tests/* .gpu/bench_* .gpu/replay_cuda .gpu/bound_runs .gpu/rlx 2>/dev/null || true
du -sh .gpu; ls -la .gpu .gpu/tests
