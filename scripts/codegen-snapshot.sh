#!/usr/bin/env bash
# Writes every generated CUDA C kernel and WGSL shader of the code-generation corpus
# (crates/rlx-cuda/tests/support/corpus.rs) to DIR/cuda and DIR/wgsl, no GPU needed; with a
# second directory BASE, compares DIR with it byte for byte and fails on any difference.
# Take BASE before a refactor of the code generators, DIR after it:
#   scripts/codegen-snapshot.sh /tmp/snap/base            # on the old commit
#   scripts/codegen-snapshot.sh /tmp/snap/new /tmp/snap/base
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: $0 DIR [BASE]" >&2
  exit 2
fi
dir=$1
rm -rf "$dir"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
for crate in rlx-cuda rlx-wgpu; do
  RLX_SNAPSHOT_DIR="$dir" cargo test --release -q -p "$crate" --test codegen_snapshot
done
echo "$(find "$dir" -type f | wc -l) files in $dir"
if [ $# -ge 2 ]; then
  if diff -r "$2" "$dir" >/dev/null; then
    echo "identical to $2"
  else
    diff -r "$2" "$dir" | head -40
    echo "differs from $2" >&2
    exit 1
  fi
fi
