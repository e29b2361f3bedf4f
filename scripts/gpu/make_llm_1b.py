"""make_llm_1b.py DIR TOKENIZER_JSON: a LlamaForCausalLM folder of the Llama-3.2-1B shape
(hidden 2048, 16 layers, 32 heads, 8 KV heads, ffn 8192, vocab 128256), random f16 weights,
made on the GPU by transformers: rows that are whole K-quant blocks, so `rlx quantize --type
q4_k` keeps every projection in Q4_K (SmolLM2's 576-wide rows fall back to Q8_0)."""
import os, shutil, sys, torch, transformers as T
d, tok = sys.argv[1], sys.argv[2]
torch.manual_seed(1)
cfg = T.LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                    num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0,
                    max_position_embeddings=4096, bos_token_id=1, eos_token_id=2)
with torch.device("cuda"):
    m = T.LlamaForCausalLM._from_config(cfg, torch_dtype=torch.float16).eval()
m.save_pretrained(d, safe_serialization=True)
shutil.copy(tok, os.path.join(d, "tokenizer.json"))
print("wrote", d, sum(p.numel() for p in m.parameters()), "params")
