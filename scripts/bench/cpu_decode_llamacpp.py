"""llama.cpp (llama-cpp-python) greedy decode speed of a GGUF file, one stream.

decode tok/s = 64 / (t(65 tokens) - t(1 token)), both from a reset context, end of
sequence ignored (the generator is stopped after the count). Prints one JSON line.
Usage: python3 cpu_decode_llamacpp.py MODEL.gguf THREADS PROMPT
"""
import json
import sys
import time

from llama_cpp import Llama
import llama_cpp

path, threads, prompt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=512,
            verbose=False)
ids = llm.tokenize(prompt.encode(), add_bos=True)


def timed(n):
    llm.reset()
    out = []
    t0 = time.perf_counter()
    for tok in llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                            repeat_penalty=1.0, reset=True):
        out.append(tok)
        if len(out) == n:
            break
    return time.perf_counter() - t0, out


timed(8)  # warm-up
t1, _ = timed(1)
t65, toks = timed(65)
print(json.dumps({
    "peer": "llama-cpp-python " + llama_cpp.__version__,
    "threads": threads,
    "decode_tok_s": 64 / (t65 - t1),
    "text": llm.detokenize(toks).decode(errors="replace")[:60],
}))
