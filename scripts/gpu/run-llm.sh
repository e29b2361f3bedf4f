#!/usr/bin/env bash
# The LLM checks on the GPU machine (after scripts/gpu/stage-llm.sh here). Parts, in order:
#   tests   rlx-cuda-llm's test binaries (kernels against references, engine against the CPU path)
#   extra   the test binaries STAGE_EXTRA staged (.gpu/cuda-tests), each alone
#   examples  the examples STAGE_EXAMPLES staged, each once (Vulkan ones need .gl unpacked)
#   python  the wheel STAGE_PYTHON staged, in a fresh venv over the machine's PyTorch: pytest
#          on python/tests (DLPack and IOBinding with CUDA tensors among them)
#   parity  tiny random folders written by transformers: rlx greedy tokens vs transformers'
#   small   SmolLM2-135M shape, f16: rlx bench and rlx generate vs transformers (peer_llm.py)
#   8b      Llama-3-8B shape, f16: prefill 512, decode batch 1 and 32, vs transformers
#   8b-q4k  the 8B folder quantized by rlx quantize to Q4_K: decode batch 1 and 32, prefill 512
#   1b-q4k  a Llama-3.2-1B-shaped Q4_K file: int8 vs f32 activations and a kernel profile
#   split   batch-1 decode with split-k products off and on (decode_split, diagnosis), 8B f16 + Q4_K
#   bert   a BertModel folder: rlx bench (f16, seq 128, batch 1/32/256), --profile/--trace, PyTorch
#   embed  rlx embed of 256 texts of 8-128 tokens (batches of 32, f16) vs PyTorch (peer_embed.py)
#   validate  rlx run (the demo) and rlx bench (the BERT folder) with --validate on CUDA: every
#          node checked against the CPU interpreter
#   zoo    the ONNX model zoo (crates/rlx/tests/zoo) on cuda and vulkan against ONNX Runtime,
#          and the onnx wheel's light CNNs (.gpu/light) through rlx onnx-test on both
#   bert-vulkan  the bert part's folder through rlx bench on vulkan (f32, f16; batch 1/32/256)
#   serve-small, serve-8b   rlx serve (continuous batching) under rlx loadtest: 64 streams
# Logs go to $OUT. Usage: bash .gpu/run-llm.sh tests parity small
# The staged .gpu (~50 MB with STAGE_PYTHON) and the tracked tree together pass the device's
# 64 MiB carry limit: carry only what the parts need, e.g. python + zoo: .gpu/run-llm.sh,
# .gpu/rlx.gz, .gpu/zoo.py, .gpu/light, .gpu/wheels, .gpu/pytests, .gl; 8b: .gpu/run-llm.sh,
# .gpu/rlx.gz, .gpu/make_llm.py, .gpu/peer_llm.py, .gpu/tokenizer.json.
# (RLX_PARITY=arch:dtype,... picks the parity folders; make_llm.py knows llama mistral qwen2 phi3 gemma)
set -uo pipefail
out=${OUT:-/tmp/llm-out}; mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export RLX_CUDA_CACHE=/tmp/rlx-cuda-cache
g=.gpu; work=/tmp/llm; mkdir -p $work
# stage-llm.sh ships the binaries compressed
for z in $g/*.gz $g/tests/*.gz $g/cuda-tests/*.gz; do
  [ -f "$z" ] && gunzip -f "$z" && chmod +x "${z%.gz}"
done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$out/gpu.txt"
# NVIDIA's Vulkan driver needs the loader, which the machine lacks: unpack .gl's packages once
vulkan_loader() {
  [ -f /tmp/.vulkan-loader ] && return
  for f in .gl/*.deb; do dpkg -x "$f" / ; done; ldconfig; touch /tmp/.vulkan-loader
}
for part in "$@"; do
  echo "== $part"
  case $part in
    tests)
      for t in $g/tests/*; do
        name=$(basename "$t")
        # TEST_SKIP: a test name filter to skip (e.g. kernels_compile_with_nvrtc, minutes of NVRTC)
        # TEST_ONLY: name filters to run (space-separated); default all
        if "$t" --test-threads=1 --nocapture ${TEST_ONLY:-} ${TEST_SKIP:+--skip $TEST_SKIP} > /tmp/test-$name.log 2>&1; then s=ok; else s=FAILED; fi
        cat /tmp/test-$name.log >> "$out/tests.log"
        grep -E "panicked|SKIPPED" -A3 /tmp/test-$name.log | head -20
        echo "$name: $s $(grep -E '^test result:' /tmp/test-$name.log | tail -1)" | tee -a "$out/summary.txt"
      done ;;
    extra)
      for t in $g/cuda-tests/*; do
        [ -x "$t" ] || continue
        name=$(basename "$t")
        if timeout 300 "$t" --test-threads=1 --nocapture > /tmp/extra-$name.log 2>&1; then s=ok; else s=FAILED; fi
        cat /tmp/extra-$name.log >> "$out/extra-tests.log"
        grep -E "panicked|SKIPPED" -A3 /tmp/extra-$name.log | head -20
        echo "$name: $s $(grep -E '^test result:' /tmp/extra-$name.log | tail -1)" | tee -a "$out/summary.txt"
      done ;;
    examples)
      for e in $(cat $g/examples.txt 2>/dev/null); do
        timeout 300 $g/$e > "$out/example-$e.log" 2>&1; echo "$e: rc=$?" | tee -a "$out/summary.txt"
        tail -15 "$out/example-$e.log"
      done ;;
    python)
      v=/tmp/rlx-venv
      python3 -m venv --system-site-packages $v > /dev/null 2>&1
      # onnx builds the tests' models (staged as a wheel: the machine's python lacks it)
      $v/bin/pip install -q --no-index --find-links $g/wheels $g/wheels/rlx-*.whl pytest \
        $(ls $g/wheels/onnx-*.whl 2> /dev/null) 2>&1 | tail -3
      (cd $g/pytests && $v/bin/python -m pytest -q -rs . 2>&1) | tee "$out/python.txt" | tail -25 ;;
    parity)
      specs=${RLX_PARITY:-llama:float32,llama:float16,llama:bfloat16,mistral:float32,qwen2:float32,qwen2:float16,gemma:float32,gemma:bfloat16,phi3:float32,phi3:bfloat16}
      for spec in ${specs//,/ }; do
        arch=${spec%%:*}; dtype=${spec##*:}
        d=$work/tiny-$arch-$dtype
        python3 $g/make_llm.py $d $arch tiny $g/tokenizer.json --dtype $dtype > /dev/null 2>&1 || { echo "make_llm $spec failed"; continue; }
        python3 $g/llm_parity.py $d $g/rlx --tokens 32 2>&1 | tail -1 | tee -a "$out/parity.txt"
      done ;;
    small)
      d=$work/smollm2-f16
      python3 $g/make_llm.py $d llama smollm2_135m $g/tokenizer.json --dtype float16 > /dev/null 2>&1
      for args in "16 129 1" "512 129 1" "16 129 32"; do
        set -- $args
        $g/rlx bench $d --device cuda --prompt-tokens $1 --gen-tokens $2 --batch $3 --json 2>&1 | tr -d '\n ' | tee -a "$out/small-bench.json"; echo | tee -a "$out/small-bench.json"
      done
      $g/rlx generate "The capital of France is" --model $d --device cuda --max-tokens 128 --ignore-eos 2>&1 | tail -1 | tee "$out/small-generate.txt"
      python3 $g/peer_llm.py $d 2>&1 | grep '^{' | tee "$out/small-peer.txt" ;;
    8b)
      d=$work/llama3-8b-f16
      python3 $g/make_llm.py $d llama llama3_8b $g/tokenizer.json --dtype float16 > /dev/null 2>&1
      for args in "16 129 1" "512 129 1" "16 65 32"; do
        set -- $args
        $g/rlx bench $d --device cuda --prompt-tokens $1 --gen-tokens $2 --batch $3 --json 2>&1 | tr -d '\n ' | tee -a "$out/8b-bench.json"; echo | tee -a "$out/8b-bench.json"
      done
      [ -n "${SKIP_PEER:-}" ] || python3 $g/peer_llm.py $d 2>&1 | grep '^{' | tee "$out/8b-peer.txt" ;;
    8b-q4k)
      # QUANT_TYPE: what rlx quantize writes (default q4_k; q4_k_m: llama.cpp's mixture)
      ty=${QUANT_TYPE:-q4_k}; d=$work/llama3-8b-f16; q=$work/llama3-8b-$ty.gguf
      [ -f $d/config.json ] || python3 $g/make_llm.py $d llama llama3_8b $g/tokenizer.json --dtype float16 > /dev/null 2>&1
      t0=$(date +%s)
      [ -f $q ] || $g/rlx quantize $d $q --type $ty 2>&1 | tail -3
      echo "quantize $ty: $(( $(date +%s) - t0 )) s, $(du -h $q | cut -f1)" | tee -a "$out/8b-q4k-quantize.txt"
      # Q4K_RUNS: the (prompt tokens, generated tokens, batch) runs, ';'-separated
      IFS=';' read -ra runs <<< "${Q4K_RUNS:-16 129 1;512 129 1;16 65 32}"
      for args in "${runs[@]}"; do
        set -- $args
        $g/rlx bench $q --device cuda --prompt-tokens $1 --gen-tokens $2 --batch $3 --json 2>&1 | tr -d '\n ' | tee -a "$out/8b-$ty-bench.json"; echo | tee -a "$out/8b-$ty-bench.json"
      done ;;
    1b-q4k)
      # Llama-3.2-1B shape quantized to Q4_K: batch-1 decode with int8 against f32
      # activations (decode_split, diagnosis) and a kernel profile, in a few minutes
      d=$work/llama-1b-f16; q=$work/llama-1b-q4k.gguf
      [ -f $d/config.json ] || python3 $g/make_llm_1b.py $d $g/tokenizer.json 2>&1 | tail -1
      [ -f $q ] || $g/rlx quantize $d $q --type q4_k 2>&1 | tail -2
      $g/decode_split $q 128 2>&1 | tee "$out/1b-q4k-split.txt" ;;
    split)
      [ -f $work/smollm2-f16/config.json ] || python3 $g/make_llm.py $work/smollm2-f16 llama smollm2_135m $g/tokenizer.json --dtype float16 > /dev/null 2>&1
      if [ -n "${SPLIT_8B:-}" ] && [ ! -f $work/llama3-8b-f16/config.json ]; then
        python3 $g/make_llm.py $work/llama3-8b-f16 llama llama3_8b $g/tokenizer.json --dtype float16 > /dev/null 2>&1
      fi
      # SPLIT_MODELS: the models to compare (default: the 8B f16 and Q4_K and SmolLM2 where present)
      for m in ${SPLIT_MODELS:-$work/llama3-8b-f16 $work/llama3-8b-q4k.gguf $work/smollm2-f16}; do
        [ -e $m ] && { echo "$m"; $g/decode_split $m 128; } 2>&1 | tee -a "$out/split.txt"
      done
      # a kernel-level profile of SmolLM2 decode where Nsight Systems is installed
      if command -v nsys > /dev/null && [ -d $work/smollm2-f16 ]; then
        nsys profile --cuda-graph-trace=node -o /tmp/nsys-small --force-overwrite true --stats=true \
          $g/decode_split $work/smollm2-f16 64 > "$out/nsys-small.txt" 2>&1
        grep -A40 "cuda_gpu_kern_sum" "$out/nsys-small.txt" | head -45
      else echo "no nsys"; fi ;;
    bert)
      # a transformers BertModel folder (MiniLM shape), rlx bench with per-kernel device
      # times and a trace, against PyTorch in the same command
      d=$work/bert-minilm
      [ -f $d/config.json ] || python3 $g/make_bert.py $d $g/bert-tokenizer.json > /dev/null 2>&1
      for b in 1 32 256; do
        $g/rlx bench $d --device cuda --precision f16 --dim batch=$b,seq=128 --iters 200 --json 2>&1 | tr -d '\n ' | tee -a "$out/bert-bench.json"; echo | tee -a "$out/bert-bench.json"
      done
      $g/rlx bench $d --device cuda --precision f16 --dim batch=32,seq=128 --iters 50 --profile --trace "$out/bert-b32-trace.json" > "$out/bert-b32-profile.txt" 2>&1
      head -30 "$out/bert-b32-profile.txt"
      [ -n "${SKIP_PEER:-}" ] || python3 $g/peer_bert.py 1,32,256 cudagraph,reduce-overhead 2>&1 | grep '^{' | tee "$out/bert-peer.txt" ;;
    embed)
      d=$work/bert-minilm; t=$work/texts256.txt
      [ -f $d/config.json ] || python3 $g/make_bert.py $d $g/bert-tokenizer.json > /dev/null 2>&1
      python3 $g/peer_embed.py texts $t $g/bert-tokenizer.json 256 8 128
      for p in f16 f32; do
        $g/rlx embed --model $d --device cuda --precision $p --file $t --runs 20 --json 2>&1 | tee -a "$out/embed.json"
      done
      $g/rlx embed --model $d --device cuda --precision f16 --file $t --json > $work/rlx-embed.json 2>&1
      python3 $g/peer_embed.py bench $d $t 32 2>&1 | grep '^{' | tee -a "$out/embed-peer.txt"
      python3 $g/peer_embed.py compare $work/rlx-embed.json $t 2>&1 | tail -1 | tee -a "$out/embed-peer.txt" ;;
    validate)
      d=$work/bert-minilm
      [ -f $d/config.json ] || python3 $g/make_bert.py $d $g/bert-tokenizer.json > /dev/null 2>&1
      $g/rlx run --device cuda --iters 1 --validate 2>&1 | tail -6 | tee "$out/validate.txt"
      for p in f32 f16; do
        $g/rlx bench $d --device cuda --precision $p --dim batch=2,seq=32 --iters 1 --warmup 0 --validate 2>&1 | tail -4 | tee -a "$out/validate.txt"
      done ;;
    zoo)
      vulkan_loader
      z=$g/zoo; [ -d $z ] || z=crates/rlx/tests/zoo
      for dev in ${ZOO_DEVICES:-cuda vulkan}; do
        python3 $g/zoo.py check $z $g/rlx $dev ${ZOO_TIME:+--time} > "$out/zoo-$dev.jsonl" 2>&1
        grep -v '"ok": true' "$out/zoo-$dev.jsonl" | tail -12
        [ -d $g/light ] && $g/rlx onnx-test $g/light --device $dev --jobs 4 2>&1 | tail -10 | tee "$out/light-$dev.txt"
      done ;;
    bert-vulkan)
      vulkan_loader
      d=$work/bert-minilm
      [ -f $d/config.json ] || python3 $g/make_bert.py $d $g/bert-tokenizer.json > /dev/null 2>&1
      for p in f32 f16; do for b in 1 32 256; do
        timeout 300 $g/rlx bench $d --device vulkan --precision $p --dim batch=$b,seq=128 --iters 50 --json 2>&1 | tr -d '\n ' | tee -a "$out/bert-vulkan.json"; echo | tee -a "$out/bert-vulkan.json"
      done; done
      $g/rlx bench $d --device vulkan --precision f16 --dim batch=32,seq=128 --iters 20 --profile > "$out/bert-vulkan-profile.txt" 2>&1
      head -30 "$out/bert-vulkan-profile.txt" ;;
    serve-small|serve-8b)
      if [ $part = serve-small ]; then name=smollm2-f16 shape=smollm2_135m; else name=llama3-8b-f16 shape=llama3_8b; fi
      d=$work/$name
      [ -f $d/config.json ] || python3 $g/make_llm.py $d llama $shape $g/tokenizer.json --dtype float16 > /dev/null 2>&1
      $g/rlx serve --model $d --device cuda --max-sequences 64 --context 512 --port 8091 > "$out/$part.log" 2>&1 &
      pid=$!
      python3 -c '
import time, urllib.request
for _ in range(1200):
    try:
        urllib.request.urlopen("http://127.0.0.1:8091/health", timeout=1); break
    except Exception: time.sleep(0.5)'
      for streams in 1 64; do
        $g/rlx loadtest --url http://127.0.0.1:8091 --streams $streams --requests $((streams * 4)) --max-tokens 128 --ignore-eos --json 2>&1 | tr -d '\n ' | tee -a "$out/$part.json"; echo | tee -a "$out/$part.json"
      done
      python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8091/metrics").read().decode())' > "$out/$part-metrics.txt"
      kill $pid; wait $pid ;;
  esac
done
