"""rlx.embed and rlx.generate on the real models of scripts/fetch-models.sh (skipped when
they are absent)."""

import importlib.util
import json

import numpy as np
import pytest

from conftest import REPO, model_path, skip

import rlx

GGUF = "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TEXTS = ["A cat sat on the mat.", "A kitten rests on a rug.", "Stock markets fell sharply today."]


def test_embed_minilm_matches_the_numpy_reference():
    folder = model_path("minilm")
    emb = rlx.embed(TEXTS, model=folder, device="cpu")
    assert isinstance(emb, np.ndarray) and emb.dtype == np.float32 and emb.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-4)
    sims = emb @ emb.T
    assert sims[0, 1] > sims[0, 2]  # the two cat sentences are closer
    model = rlx.load(folder, device="cpu")
    assert isinstance(model, rlx.EmbeddingModel) and model.dim == 384
    np.testing.assert_allclose(model.embed(TEXTS), emb, rtol=1e-5, atol=1e-6)
    assert rlx.embed("A cat sat on the mat.", model=model).shape == (1, 384)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        skip("the Python package `tokenizers` is absent: embeddings not checked against the numpy reference")
    spec = importlib.util.spec_from_file_location("minilm_ref", REPO / "scripts/ref/minilm_ref.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    tok = Tokenizer.from_file(folder + "/tokenizer.json")
    tok.no_padding()
    weights = ref.load_safetensors(folder + "/model.safetensors")
    cfg = json.load(open(folder + "/config.json"))
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
    for text, row in zip(TEXTS, emb):
        want = ref.embed(weights, cfg, tok.encode(text).ids, prefix)
        np.testing.assert_allclose(row, want, rtol=1e-4, atol=1e-4)


def test_embed_errors():
    with pytest.raises(rlx.ModelError):
        rlx.embed(["x"], model="/no/such/folder", device="cpu")
    folder = model_path("smollm2-hf")
    with pytest.raises(rlx.ModelError, match="generate"):
        rlx.embed(["x"], model=folder, device="cpu")


def test_generate_streams_the_same_text():
    gguf = model_path(GGUF)
    prompt = "The capital of France is"
    pieces = list(rlx.generate(prompt, model=gguf, max_tokens=12, device="cpu"))
    assert pieces and all(isinstance(p, str) for p in pieces)
    text = rlx.generate(prompt, model=gguf, max_tokens=12, stream=False, device="cpu")
    assert text == "".join(pieces)  # greedy: the same tokens
    assert "Paris" in text
    model = rlx.load(gguf, device="cpu")
    assert isinstance(model, rlx.LanguageModel)
    sampled = model.generate(prompt, 12, stream=False, temperature=0.8, top_k=40, top_p=0.9, seed=7)
    again = model.generate(prompt, 12, stream=False, temperature=0.8, top_k=40, top_p=0.9, seed=7)
    assert sampled == again  # seeded
    assert model.generate(prompt, 0, stream=False) == ""
    # f32 activations in the quantized products (`exact_quant`), a shorter context
    exact = rlx.load(gguf, device="cpu", context=64, exact_quant=True)
    assert "Paris" in exact.generate(prompt, 12, stream=False)
    with pytest.raises(rlx.InvalidArgument, match="context"):
        exact.generate("x " * 80, 4, stream=False)
    with pytest.raises(rlx.InvalidArgument, match="language models"):
        rlx.load(model_path("minilm"), device="cpu", context=8)
    # the convenience function takes the same load settings for a path, not for a model
    text = rlx.generate(prompt, model=gguf, max_tokens=12, stream=False, device="cpu", context=64, exact_quant=True)
    assert "Paris" in text
    with pytest.raises(rlx.InvalidArgument, match="context"):
        rlx.generate("x " * 80, model=gguf, max_tokens=4, stream=False, device="cpu", context=64)
    with pytest.raises(rlx.InvalidArgument, match="load settings"):
        rlx.generate(prompt, model=exact, max_tokens=4, context=64)


def test_generate_hf_folder_and_errors():
    folder = model_path("smollm2-hf")
    text = rlx.generate("The capital of France is", model=folder, max_tokens=6, stream=False, device="cpu")
    assert isinstance(text, str) and text
    with pytest.raises(rlx.InvalidArgument, match="temperature"):
        rlx.generate("x", model=folder, temperature=-1.0, device="cpu")
    with pytest.raises(rlx.ModelError):
        rlx.generate("x", model="/no/such/model.gguf", device="cpu")
