"""llm_parity.py DIR RLX [--device cuda] [--tokens 32]: greedy tokens of `rlx generate` on a
causal-LM folder against transformers' on the same prompt ids (eos ignored on both sides), and
the last-position logits of transformers for the prompt as a reference figure. Prints one JSON
line: arch, dtype, tokens compared, first mismatch (or null). Any causal LM RLX reads
(llama, mistral, qwen2, gemma, phi3); `--device cpu` runs both sides on the CPU."""
import argparse, json, subprocess, sys, torch
from transformers import AutoModelForCausalLM

p = argparse.ArgumentParser()
p.add_argument("dir"); p.add_argument("rlx")
p.add_argument("--device", default="cuda"); p.add_argument("--tokens", type=int, default=32)
p.add_argument("--prompt", default="The capital of France is a city of")
a = p.parse_args()
out = subprocess.run([a.rlx, "generate", a.prompt, "--model", a.dir, "--device", a.device,
                      "--max-tokens", str(a.tokens), "--ignore-eos", "--json"],
                     capture_output=True, text=True)
if out.returncode != 0:
    print(json.dumps({"dir": a.dir, "error": out.stderr.strip()[-400:]})); sys.exit(1)
r = json.loads(out.stdout)
dev = "cuda" if a.device == "cuda" else "cpu"
m = AutoModelForCausalLM.from_pretrained(a.dir, torch_dtype="auto").to(dev).eval()
ids = torch.tensor([r["prompt_tokens"]], device=dev)
with torch.no_grad():
    g = m.generate(ids, max_new_tokens=a.tokens, min_new_tokens=a.tokens, do_sample=False,
                   eos_token_id=None, pad_token_id=0)
want = g[0, ids.shape[1]:].tolist()
got = r["tokens"]
first = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), None)
if first is None and len(got) != len(want):
    first = min(len(got), len(want))
print(json.dumps({"dir": a.dir, "dtype": str(m.dtype), "compared": len(want),
                  "first_mismatch": first, "rlx": got[:12], "transformers": want[:12],
                  "decode_tok_s": r["timings"]["decode_tok_s"]}), flush=True)
sys.exit(0 if first is None else 2)
