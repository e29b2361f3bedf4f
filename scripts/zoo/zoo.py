"""The ONNX model zoo (issue 24 item 5): real architectures exported by PyTorch with random
weights and dynamic axes, each checked at two shapes against ONNX Runtime.

  zoo.py export OUT [NAME,...]   export every model (or those named) to OUT/NAME/model.onnx with
                                 inputs and ONNX Runtime's outputs at two shapes (OUT/NAME/{a,b}/)
  zoo.py variants OUT [NAME,...]  (re)write the ONNX Runtime variants (NAME-ort-opt, NAME-int8) of
                                 exported models (default: every name in VARIANTS)
  zoo.py check OUT RLX DEVICE [--precision P] [--time]   run `RLX run` on every exported model
                                 and shape, compare with ONNX Runtime (rel L2), one JSON line per
                                 case and a summary line; exit 1 if any case fails; --time also
                                 times `RLX bench` against ONNX Runtime (CPU EP) per case
  zoo.py table OUT JSONL...      a markdown table from check outputs

Needs torch, transformers, torchvision, onnx, onnxruntime (export); numpy (check).
"""
import json, os, subprocess, sys, time, tempfile, shutil
import numpy as np

SEED = 0
TOL = {"f32": 1e-3, "f16": 3e-2, "bf16": 6e-2}


def text_inputs(vocab, b, s, types=True, mask=True):
    import torch
    g = torch.Generator().manual_seed(SEED + b * 1000 + s)
    x = {"input_ids": torch.randint(3, vocab, (b, s), generator=g)}
    if mask:
        m = torch.ones(b, s, dtype=torch.long)
        if b > 1:
            m[-1, s // 2:] = 0  # a padded row
        x["attention_mask"] = m
    if types:
        x["token_type_ids"] = torch.zeros(b, s, dtype=torch.long)
    return x


def image(b, c=3, h=64, w=64):
    import torch
    g = torch.Generator().manual_seed(SEED + b)
    return torch.randn(b, c, h, w, generator=g)


def models():
    """name -> (builder, inputs(shape_index) -> dict, dynamic axes, output names)"""
    import torch, transformers as T, torchvision
    text_axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                 "token_type_ids": {0: "batch", 1: "sequence"}}
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 vocab_size=256, max_position_embeddings=64)
    enc = {}

    def encoder(name, cfg_cls, model_cls, types=True, **extra):
        cfg = dict(small); cfg.update(extra)
        enc[name] = (lambda: model_cls(cfg_cls(**cfg)),
                     lambda i, types=types: text_inputs(256, [1, 3][i], [7, 19][i], types=types),
                     text_axes, ["last_hidden_state"])

    encoder("bert", T.BertConfig, T.BertModel)
    encoder("roberta", T.RobertaConfig, T.RobertaModel, types=False)
    encoder("electra", T.ElectraConfig, T.ElectraModel, embedding_size=32)
    encoder("mpnet", T.MPNetConfig, T.MPNetModel, types=False)
    encoder("deberta-v2", T.DebertaV2Config, T.DebertaV2Model, types=False)
    encoder("albert", T.AlbertConfig, T.AlbertModel, embedding_size=16)
    enc["distilbert"] = (lambda: T.DistilBertModel(T.DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=64, vocab_size=256, max_position_embeddings=64)),
                         lambda i: text_inputs(256, [1, 3][i], [7, 19][i], types=False), text_axes, ["last_hidden_state"])

    def decoder(name, cfg_cls, model_cls, **extra):
        cfg = dict(small); cfg.update(extra)
        cfg.setdefault("num_key_value_heads", 2)
        enc[name] = (lambda: model_cls(cfg_cls(**cfg)),
                     lambda i: text_inputs(256, [1, 2][i], [5, 13][i], types=False),
                     text_axes, ["logits"])

    decoder("llama", T.LlamaConfig, T.LlamaForCausalLM)
    decoder("mistral", T.MistralConfig, T.MistralForCausalLM)
    decoder("qwen2", T.Qwen2Config, T.Qwen2ForCausalLM)
    decoder("phi3", T.Phi3Config, T.Phi3ForCausalLM, pad_token_id=0)
    decoder("gemma", T.GemmaConfig, T.GemmaForCausalLM, head_dim=8)
    enc["gpt2"] = (lambda: T.GPT2LMHeadModel(T.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=256, n_positions=64)),
                   lambda i: text_inputs(256, [1, 2][i], [5, 13][i], types=False), text_axes, ["logits"])
    enc["t5-encoder"] = (lambda: T.T5EncoderModel(T.T5Config(d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8, vocab_size=256)),
                         lambda i: text_inputs(256, [1, 3][i], [7, 19][i], types=False), text_axes, ["last_hidden_state"])

    def bart_inputs(i):
        x = text_inputs(256, [1, 2][i], [7, 15][i], types=False)
        x["decoder_input_ids"] = x["input_ids"][:, : [3, 6][i]].clone()
        return x
    bart_axes = dict(text_axes); bart_axes["decoder_input_ids"] = {0: "batch", 1: "target"}
    enc["bart"] = (lambda: T.BartModel(T.BartConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                                    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=256,
                                                    max_position_embeddings=64)),
                   bart_inputs, bart_axes, ["last_hidden_state"])

    # a decoder step with past key values as inputs and the grown cache as outputs
    kv_cfg = T.LlamaConfig(**dict(small, num_key_value_heads=2))
    class LlamaStep(torch.nn.Module):
        def __init__(self):
            super().__init__(); self.m = T.LlamaForCausalLM(kv_cfg)
        def forward(self, input_ids, attention_mask, pk0, pv0, pk1, pv1):
            cache = T.DynamicCache(config=kv_cfg)
            cache.update(pk0, pv0, 0); cache.update(pk1, pv1, 1)
            past = pk0.shape[2]
            pos = torch.arange(past, past + input_ids.shape[1]).unsqueeze(0)
            r = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                       position_ids=pos, use_cache=True)
            c = r.past_key_values
            return r.logits, c.layers[0].keys, c.layers[0].values, c.layers[1].keys, c.layers[1].values
    def kv_inputs(i):
        b, s, p = [1, 2][i], [3, 1][i], [5, 9][i]
        g = torch.Generator().manual_seed(SEED + i)
        x = {"input_ids": torch.randint(3, 256, (b, s), generator=g),
             "attention_mask": torch.ones(b, p + s, dtype=torch.long)}
        for n in ("past_key_0", "past_value_0", "past_key_1", "past_value_1"):
            x[n] = torch.randn(b, 2, p, 8, generator=g)
        return x
    kv_axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total"}}
    kv_axes.update({n: {0: "batch", 2: "past"} for n in ("past_key_0", "past_value_0", "past_key_1", "past_value_1")})
    enc["llama-kv"] = (LlamaStep, kv_inputs, kv_axes,
                       ["logits", "present_key_0", "present_value_0", "present_key_1", "present_value_1"])

    img_axes = {"pixel_values": {0: "batch"}}
    def vision(name, build, size=32, out="last_hidden_state"):
        enc[name] = (build, lambda i, size=size: {"pixel_values": image([1, 3][i], h=size, w=size)}, img_axes, [out])
    vision("vit", lambda: T.ViTModel(T.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                                  image_size=32, patch_size=8)))
    vision("convnext", lambda: T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1], image_size=64)), 64)
    vision("swin", lambda: T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4)))
    # torchvision's own architectures, narrowed so the exports stay small (the test fixtures
    # are committed); squeezenet and resnet18 at full width only with ZOO_FULL=1
    from torchvision.models import efficientnet
    vision("mobilenet_v2", lambda: torchvision.models.mobilenet_v2(num_classes=10, width_mult=0.25), 64, "output")
    vision("efficientnet", lambda: efficientnet.EfficientNet(efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)[0],
                                                              dropout=0.0, num_classes=10), 64, "output")
    if os.environ.get("ZOO_FULL"):
        vision("squeezenet", lambda: torchvision.models.squeezenet1_1(num_classes=10), 64, "output")
        vision("resnet18", lambda: torchvision.models.resnet18(num_classes=10), 64, "output")

    def clip_inputs(i):
        x = text_inputs(256, [1, 2][i], [6, 11][i], types=False)
        x["pixel_values"] = image([1, 2][i], h=32, w=32)
        return x
    clip_axes = dict(text_axes); clip_axes["pixel_values"] = {0: "images"}
    enc["clip"] = (lambda: T.CLIPModel(T.CLIPConfig(
        text_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=256, max_position_embeddings=64),
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8),
        projection_dim=16)), clip_inputs, clip_axes, ["logits_per_image"])

    def audio(i):
        import torch
        g = torch.Generator().manual_seed(SEED + i)
        return {"input_values": torch.randn([1, 2][i], [1600, 2400][i], generator=g)}
    enc["wav2vec2"] = (lambda: T.Wav2Vec2Model(T.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                                                conv_dim=(32, 32), conv_stride=(5, 4), conv_kernel=(10, 4),
                                                                num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)),
                       audio, {"input_values": {0: "batch", 1: "samples"}}, ["last_hidden_state"])
    # an audio encoder-decoder: Whisper (log-mel frames in, the decoder's states out)
    def whisper_inputs(i):
        g = torch.Generator().manual_seed(SEED + 10 + i)
        b, t = [1, 2][i], [3, 7][i]
        return {"input_features": torch.randn(b, 16, 32, generator=g),
                "decoder_input_ids": torch.randint(3, 256, (b, t), generator=g)}
    enc["whisper"] = (lambda: T.WhisperModel(T.WhisperConfig(
        d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=256, num_mel_bins=16, max_source_positions=16,
        max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)),
        whisper_inputs, {"input_features": {0: "batch"}, "decoder_input_ids": {0: "batch", 1: "target"}},
        ["last_hidden_state"])

    # the full T5 (encoder-decoder with relative position buckets on both sides)
    def t5_inputs(i):
        x = text_inputs(256, [1, 2][i], [7, 15][i], types=False)
        x["decoder_input_ids"] = x["input_ids"][:, : [2, 5][i]].clone()
        return x
    enc["t5"] = (lambda: T.T5Model(T.T5Config(d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                                                d_kv=8, vocab_size=256, decoder_start_token_id=0)),
                 t5_inputs, bart_axes, ["last_hidden_state"])

    # vision: a bottleneck ResNet and a SegFormer (efficient attention with spatial reduction)
    vision("resnet", lambda: T.ResNetModel(T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 32, 64],
                                                           depths=[1, 1, 1, 1], layer_type="bottleneck")), 64)
    vision("segformer", lambda: T.SegformerModel(T.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
        strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32)), 64)
    return enc


# models also written through ONNX Runtime's own tools (issue 24 item 5): the transformer
# optimizer (`NAME-ort-opt`, its fused contrib ops) and quantize_dynamic (`NAME-int8`, int8
# products); name -> the optimizer's model_type
VARIANTS = {"bert": "bert", "distilbert": "bert", "gpt2": "gpt2", "vit": "vit", "bart": "bart"}


def variants(out, name):
    """Writes NAME-ort-opt and NAME-int8 beside OUT/NAME from its model.onnx and inputs; each
    variant's references are ONNX Runtime's outputs on the variant; the int8 one also keeps
    the f32 model's (`f32.OUT.npy`), so accuracy is judged against both."""
    import onnxruntime as ort, onnx
    from onnxruntime.transformers.optimizer import optimize_model
    from onnxruntime.quantization import quantize_dynamic, QuantType
    base = os.path.join(out, name)
    for kind in ("ort-opt", "int8"):
        d = os.path.join(out, f"{name}-{kind}"); os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        try:
            if kind == "ort-opt":
                m = optimize_model(os.path.join(base, "model.onnx"), model_type=VARIANTS[name], num_heads=4,
                                   hidden_size=32, opt_level=1)
                m.save_model_to_file(path)
            else:
                quantize_dynamic(os.path.join(base, "model.onnx"), path, weight_type=QuantType.QInt8)
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            outs = [o.name for o in sess.get_outputs()]
            for tag in "ab":
                sd = os.path.join(d, tag); os.makedirs(sd, exist_ok=True)
                feeds = {}
                for f in sorted(os.listdir(os.path.join(base, tag))):
                    if f.endswith(".npy") and not f.startswith("ref."):
                        shutil.copy(os.path.join(base, tag, f), sd)
                        feeds[f[:-4]] = np.load(os.path.join(sd, f))
                    elif f.startswith("ref.") and kind == "int8":
                        shutil.copy(os.path.join(base, tag, f), os.path.join(sd, "f32." + f[4:]))
                want = {i.name for i in sess.get_inputs()}
                feeds = {k: v for k, v in feeds.items() if k in want}
                for o, v in zip(outs, sess.run(None, feeds)):
                    np.save(os.path.join(sd, f"ref.{o}.npy"), v)
                json.dump({"shapes": {k: list(v.shape) for k, v in feeds.items()}}, open(os.path.join(sd, "meta.json"), "w"))
            ops = sorted({n.op_type for n in onnx.load(path).graph.node})
            json.dump({"ops": ops, "outputs": outs, "int8": kind == "int8"}, open(os.path.join(d, "model.json"), "w"))
            print(json.dumps({"export": f"{name}-{kind}", "ok": True, "ops": ops}), flush=True)
        except Exception as e:
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            json.dump({"error": msg}, open(os.path.join(d, "model.json"), "w"))
            print(json.dumps({"export": f"{name}-{kind}", "ok": False, "error": msg}), flush=True)


def export(out, names=None):
    import torch, onnxruntime as ort
    torch.manual_seed(SEED)
    zoo = models()
    for name, (build, inputs, axes, outs) in zoo.items():
        if names and name not in names:
            continue
        d = os.path.join(out, name); os.makedirs(d, exist_ok=True)
        t0 = time.time()
        try:
            torch.manual_seed(SEED)
            m = build().eval()
            x0 = inputs(0)
            keys = list(x0)
            class Wrap(torch.nn.Module):
                def __init__(self, m): super().__init__(); self.m = m
                def forward(self, *args):
                    hf = hasattr(self.m, "config")
                    r = self.m(**dict(zip(keys, args))) if hf else self.m(*args)
                    if isinstance(r, (torch.Tensor, tuple)): return r
                    return r[outs[0]] if outs[0] in r else r[0]
            w = Wrap(m).eval()
            path = os.path.join(d, "model.onnx")
            with torch.no_grad():
                kw = dict(input_names=keys, output_names=outs, opset_version=17,
                          dynamic_axes={k: v for k, v in axes.items() if k in keys} | {outs[0]: {0: "batch"}})
                torch.onnx.export(w, tuple(x0.values()), path, dynamo=False, **kw)
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            for i, tag in enumerate("ab"):
                x = inputs(i)
                sd = os.path.join(d, tag); os.makedirs(sd, exist_ok=True)
                feeds = {k: v.numpy() for k, v in x.items()}
                for k, v in feeds.items():
                    np.save(os.path.join(sd, f"{k}.npy"), v)
                ref = sess.run(None, feeds)
                for o, v in zip([o.name for o in sess.get_outputs()], ref):
                    np.save(os.path.join(sd, f"ref.{o}.npy"), v)
                ts = []
                for _ in range(5):
                    t = time.perf_counter(); sess.run(None, feeds); ts.append((time.perf_counter() - t) * 1e3)
                json.dump({"ort_ms": sorted(ts)[2], "shapes": {k: list(v.shape) for k, v in feeds.items()}},
                          open(os.path.join(sd, "meta.json"), "w"))
            import onnx
            ops = sorted({n.op_type for n in onnx.load(path).graph.node})
            json.dump({"ops": ops, "outputs": [o.name for o in sess.get_outputs()]}, open(os.path.join(d, "model.json"), "w"))
            print(json.dumps({"export": name, "ok": True, "ops": len(ops), "s": round(time.time() - t0, 1)}), flush=True)
            if name in VARIANTS:
                variants(out, name)
        except Exception as e:
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            json.dump({"error": msg}, open(os.path.join(d, "model.json"), "w"))
            print(json.dumps({"export": name, "ok": False, "error": msg}), flush=True)


def rel_l2(a, b):
    a = a.astype(np.float64).ravel(); b = b.astype(np.float64).ravel()
    n = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / (n if n > 0 else 1.0))


def ort_median_ms(path, feeds, iters):
    """ONNX Runtime's median time of `iters` runs (CPU EP, default threads) after 3 warm-up runs."""
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, feeds)
    ts = []
    for _ in range(iters):
        t = time.perf_counter(); sess.run(None, feeds); ts.append((time.perf_counter() - t) * 1e3)
    return float(np.median(ts))


def check(out, rlx, device, precision="f32", timed=False, iters=20):
    """Runs every model and shape through `rlx run` and compares with ONNX Runtime's saved
    outputs. An int8 model (`-int8`) passes within 1e-3 of ONNX Runtime's int8 outputs, or
    when its distance from the f32 model's outputs is at most 1.25x ONNX Runtime's own (+1e-4)
    and it stays within 0.1 of them: activations are quantized at run time, so a value on a
    rounding boundary may land one step apart. `timed` also times `rlx bench` against ONNX
    Runtime (CPU EP) in the same process, medians of `iters` runs."""
    failed = total = 0
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        meta = os.path.join(d, "model.json")
        if not os.path.isfile(meta) or "error" in json.load(open(meta)):
            continue
        info = json.load(open(meta))
        for tag in "ab":
            sd = os.path.join(d, tag)
            ins = [f for f in sorted(os.listdir(sd)) if f.endswith(".npy") and not f.startswith(("ref.", "f32."))]
            res = tempfile.mkdtemp()
            cmd = [rlx, "run", os.path.join(d, "model.onnx"), "--device", device, "--precision", precision,
                   "--output", res] + sum([["--input", f"{f[:-4]}={os.path.join(sd, f)}"] for f in ins], [])
            t = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True)
            wall = (time.perf_counter() - t) * 1e3
            case = {"model": name, "shape": tag, "device": device, "precision": precision, "ops": len(info["ops"])}
            total += 1
            if p.returncode != 0:
                case.update(ok=False, error=(p.stderr.strip().splitlines() or ["?"])[-1][:400])
            else:
                errs = {}
                for o in info["outputs"]:
                    got = os.path.join(res, f"{o}.npy")
                    ref = np.load(os.path.join(sd, f"ref.{o}.npy"))
                    errs[o] = rel_l2(np.load(got), ref) if os.path.isfile(got) else float("inf")
                worst = max(errs.values())
                ok = worst <= TOL[precision]
                case.update(rel_l2=worst, wall_ms=round(wall, 1))
                if info.get("int8") and not ok:
                    mine = theirs = 0.0
                    for o in info["outputs"]:
                        f32 = os.path.join(sd, f"f32.{o}.npy")
                        got = os.path.join(res, f"{o}.npy")
                        if os.path.isfile(f32) and os.path.isfile(got):
                            mine = max(mine, rel_l2(np.load(got), np.load(f32)))
                            theirs = max(theirs, rel_l2(np.load(os.path.join(sd, f"ref.{o}.npy")), np.load(f32)))
                    ok = worst <= 0.1 and mine <= 1.25 * theirs + 1e-4
                    case.update(rlx_vs_f32=mine, ort_vs_f32=theirs)
                case["ok"] = ok
                if timed and ok:
                    bench = [rlx, "bench", os.path.join(d, "model.onnx"), "--device", device, "--precision", precision,
                             "--warmup", "3", "--iters", str(iters), "--json"] + \
                        sum([["--input", f"{f[:-4]}={os.path.join(sd, f)}"] for f in ins], [])
                    b = subprocess.run(bench, capture_output=True, text=True)
                    try:
                        case["rlx_ms"] = json.loads(b.stdout)["median_ms"]
                    except (ValueError, KeyError):
                        case["bench_error"] = (b.stderr.strip().splitlines() or ["?"])[-1][:300]
                    feeds = {f[:-4]: np.load(os.path.join(sd, f)) for f in ins}
                    case["ort_ms"] = ort_median_ms(os.path.join(d, "model.onnx"), feeds, iters)
            failed += not case["ok"]
            shutil.rmtree(res, ignore_errors=True)
            print(json.dumps(case), flush=True)
    print(json.dumps({"summary": device, "precision": precision, "cases": total, "failed": failed}), flush=True)
    return 1 if failed else 0


def table(out, *logs):
    rows = {}
    for log in logs:
        for line in open(log):
            if not line.startswith("{"): continue
            c = json.loads(line)
            if "model" in c:
                rows.setdefault(c["model"], {})[(c["device"], c["precision"], c["shape"])] = c
    cols = sorted({k for r in rows.values() for k in r})
    timed = [k for k in cols if any("rlx_ms" in r.get(k, {}) for r in rows.values())]
    print("| model | ops | " + " | ".join(f"{d} {p} {s}" for d, p, s in cols)
          + "".join(f" | {d} {s}: RLX / ORT ms (ratio)" for d, p, s in timed) + " |")
    print("|---|---|" + "---|" * (len(cols) + len(timed)))
    for m, r in sorted(rows.items()):
        cells = []
        for k in cols:
            c = r.get(k)
            cells.append("—" if c is None else (f"ok {c['rel_l2']:.0e}" if c["ok"] else ("FAIL " + (f"{c['rel_l2']:.0e}" if "rel_l2" in c else c.get("error", "")[:60]))))
        for k in timed:
            c = r.get(k, {})
            cells.append(f"{c['rlx_ms']:.3f} / {c['ort_ms']:.3f} ({c['rlx_ms'] / c['ort_ms']:.2f}x)" if "rlx_ms" in c else "—")
        print(f"| {m} | {next(iter(r.values()))['ops']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "export":
        export(args[0], set(args[1].split(",")) if len(args) > 1 else None)
    elif cmd == "variants":
        for n in (args[1].split(",") if len(args) > 1 else VARIANTS):
            variants(args[0], n)
    elif cmd == "check":
        prec = "f32"
        if "--precision" in args:
            i = args.index("--precision"); prec = args[i + 1]; del args[i:i + 2]
        timed = "--time" in args
        if timed:
            args.remove("--time")
        sys.exit(check(args[0], args[1], args[2], prec, timed))
    elif cmd == "table":
        table(*args)
