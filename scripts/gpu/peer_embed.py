"""The `rlx embed` benchmark's peer (issue 25): sentence embeddings of many texts of mixed length.

  peer_embed.py texts OUT TOKENIZER_JSON [N=256 MIN=8 MAX=128]   write N texts, one a line, of
      MIN..MAX tokens (uniform, seeded) under the tokenizer
  peer_embed.py bench DIR TEXTS [BATCH=32]   PyTorch fp16 BertModel of the folder: texts sorted by
      length, batches of BATCH padded to their longest, mean over real tokens, L2-normalised (what
      `rlx embed --file` does); CUDA-synchronised median of 20 passes after 3; one JSON line;
      the embeddings go to TEXTS.peer.npy
  peer_embed.py compare RLX_JSON TEXTS   largest |rlx - peer| over the embeddings (rlx embed --json)
"""
import json, random, sys, time
import numpy as np

def texts(out, tok_file, n=256, lo=8, hi=128):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_file); tok.no_padding(); tok.no_truncation()
    rng = random.Random(7)
    words = [w for w in ("the of and to in is was for on that with as by at from his an were are which this be "
             "has or had first one their its new after who they have her she two been other when there all "
             "during into school time may years more most only over city some world would where later up such "
             "used many can state about national out known university united then made river music language "
             "model graph kernel tensor memory device runtime compiler attention sequence batch token").split()]
    lines = []
    for _ in range(int(n)):
        want = rng.randint(int(lo), int(hi)); line = []
        while True:
            line.append(rng.choice(words))
            if len(tok.encode(" ".join(line)).ids) >= want: break
        lines.append(" ".join(line))
    open(out, "w").write("\n".join(lines) + "\n")
    print(json.dumps({"texts": len(lines), "file": out}))

def bench(d, path, batch=32):
    import torch
    from tokenizers import Tokenizer
    from transformers import BertModel
    lines = [l for l in open(path).read().splitlines() if l.strip()]
    tok = Tokenizer.from_file(f"{d}/tokenizer.json"); tok.no_padding(); tok.enable_truncation(512)
    m = BertModel.from_pretrained(d).cuda().half().eval()
    def run():
        ids = [e.ids for e in tok.encode_batch(lines)]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        out = [None] * len(ids)
        for s in range(0, len(order), int(batch)):
            chunk = order[s:s + int(batch)]; L = max(len(ids[i]) for i in chunk)
            x = torch.zeros(len(chunk), L, dtype=torch.long); a = torch.zeros(len(chunk), L, dtype=torch.long)
            for r, i in enumerate(chunk):
                x[r, :len(ids[i])] = torch.tensor(ids[i]); a[r, :len(ids[i])] = 1
            x, a = x.cuda(non_blocking=True), a.cuda(non_blocking=True)
            h = m(input_ids=x, attention_mask=a).last_hidden_state.float()
            e = (h * a[..., None]).sum(1) / a.sum(1, keepdim=True)
            e = torch.nn.functional.normalize(e, dim=-1).cpu().numpy()
            for r, i in enumerate(chunk): out[i] = e[r]
        return np.stack(out)
    with torch.inference_mode():
        for _ in range(3): emb = run()
        ts = []
        for _ in range(20):
            torch.cuda.synchronize(); t = time.perf_counter(); emb = run(); torch.cuda.synchronize()
            ts.append((time.perf_counter() - t) * 1e3)
    ts.sort(); np.save(path + ".peer.npy", emb)
    print(json.dumps({"peer": "pytorch-eager-fp16", "torch": torch.__version__, "texts": len(lines),
                      "batch": int(batch), "median_ms": round(ts[len(ts) // 2], 3), "min_ms": round(ts[0], 3)}))

def compare(rlx_json, path):
    a = np.array(json.load(open(rlx_json))["embeddings"], dtype=np.float64)
    b = np.load(path + ".peer.npy").astype(np.float64)
    print(json.dumps({"compare": "rlx vs pytorch embeddings", "rows": len(a),
                      "max_abs": float(np.abs(a - b).max()), "min_cosine": float((a * b).sum(1).min())}))

if __name__ == "__main__":
    {"texts": texts, "bench": bench, "compare": compare}[sys.argv[1]](*sys.argv[2:])
