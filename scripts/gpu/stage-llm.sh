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
cargo build --release -p rlx
cargo build --release -p rlx-cuda-llm --example decode_split
cp "$target/release/rlx" "$target/release/examples/decode_split" .gpu/
cp scripts/gpu/run-llm.sh scripts/gpu/llm_parity.py scripts/gpu/peer_embed.py scripts/gpu/make_llm_1b.py .gpu/
cp "$shared/gpu/peers/make_llm.py" "$shared/gpu/peers/peer_llm.py" .gpu/
cp "$shared/gpu/peers/make_bert.py" "$shared/gpu/peers/peer_bert.py" .gpu/
cp scripts/zoo/zoo.py .gpu/; cp -r crates/rlx/tests/zoo .gpu/zoo
cp models/smollm2-hf/tokenizer.json .gpu/tokenizer.json
cp models/minilm/tokenizer.json .gpu/bert-tokenizer.json
strip .gpu/tests/* .gpu/rlx .gpu/decode_split 2>/dev/null || true
# compressed, so the carried tree stays under the device tool's 64 MiB (run-llm.sh unpacks them)
gzip -9 .gpu/tests/* .gpu/rlx .gpu/decode_split
du -sh .gpu; ls -la .gpu .gpu/tests
