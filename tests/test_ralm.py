"""RALM, the residual LM baseline of paper d (sec. 4.1, eq. 6): P_RALM ∝ exp(logits_LM + logits_phi)
with the base LM frozen. Checked against the sum of logits by hand, against the base alone when phi
says nothing, the sampler's cached path against its slow path, `lm train --residual-of` end to end
(it learns, the base's files stay as they were) and the folder's round trip and its refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_lm_sampling import make_tiny_lm
from test_lm_train import TINY, data  # noqa: F401  (data: the toy corpus fixture)

from textebm.cli import main
from textebm.errors import TextebmError
from textebm.fingerprint import folder_sha256
from textebm.lm.generate import generate
from textebm.lm.scoring import score_sequences
from textebm.models.load import load_lm
from textebm.models.ralm import BaseRef, ResidualLM, save_residual_lm

SEQS = [[2, 5, 6, 7, 8, 3], [2, 9, 10, 3], [2, 11, 5, 12, 6, 7, 9, 3]]  # [bos] words [eos] of make_tiny_lm


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ralm")
    return make_tiny_lm(root / "base", seed=0), make_tiny_lm(root / "phi", seed=1)


def _ralm(pair) -> tuple[ResidualLM, object, object]:
    base, tok, meta = load_lm(pair[0])
    phi, _, _ = load_lm(pair[1])
    ref = BaseRef(base=str(pair[0].resolve()), base_sha256=folder_sha256(pair[0]), base_parameters=0)
    return ResidualLM(base, phi, ref), tok, meta


def _by_hand(base_logits: torch.Tensor, phi_logits: torch.Tensor, seq: list[int]) -> list[float]:
    lp = torch.log_softmax(base_logits[0].double() + phi_logits[0].double(), -1)  # (T, V)
    return [float(lp[t, seq[t + 1]]) for t in range(len(seq) - 1)]


def test_ralm_logprobs_are_the_log_softmax_of_the_summed_logits(pair):
    model, _, _ = _ralm(pair)
    got = score_sequences(model, SEQS, pad=0, batch_size=2)  # padded batches through textebm's scorer
    for seq, lps in zip(SEQS, got):
        ids = torch.tensor([seq])
        with torch.no_grad():
            want = _by_hand(model.base(ids).logits, model.phi(ids).logits, seq)
        assert lps == pytest.approx(want, abs=1e-5)
    # and it is not the base alone: phi moves the probabilities
    assert got != score_sequences(model.base, SEQS, pad=0, batch_size=2)


def test_with_phi_silent_the_ralm_is_the_base(pair):
    model, _, _ = _ralm(pair)
    with torch.no_grad():
        model.phi.lm_head.weight.zero_()  # phi's logits are 0 everywhere: P_RALM = P_LM
    got = score_sequences(model, SEQS, pad=0, batch_size=3)
    want = score_sequences(model.base, SEQS, pad=0, batch_size=3)
    for a, b in zip(got, want):
        assert a == pytest.approx(b, abs=1e-5)


def test_generate_with_the_cache_equals_generate_without(pair):
    model, _, _ = _ralm(pair)
    contexts = [[2, 5, 6], [2], [2, 7, 8, 9, 10]]  # left-padded to one batch, rows ending at different times

    def run(use_cache: bool):
        gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
        return generate(model, contexts, [6, 9, 4], gens, eos=3, pad=0, top_k=8, banned=[0, 1],
                        use_cache=use_cache)

    cached, slow = run(True), run(False)
    assert [g.tokens for g in cached] == [g.tokens for g in slow]
    assert [g.logprob for g in cached] == pytest.approx([g.logprob for g in slow], abs=1e-4)
    assert sum(len(g.tokens) for g in cached) > 6  # it sampled something


def test_a_gated_convolutional_base_samples_the_same_with_and_without_the_cache():
    """The cache is laid out per model: a GCNN base (its cache holds past inputs, not keys and values)
    beside a Llama phi; a row ends first, so the cache's rows are selected mid-way."""
    from textebm.models.build import SmallLMConfig, build_causal_lm
    from textebm.models.gcnn import build_gcnn

    base = build_gcnn(40, 16, 2, 3, 64, pad=0, bos=1, eos=2, seed=0)
    tok = type("Tok", (), {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "__len__": lambda self: 40})()
    phi = build_causal_lm(SmallLMConfig(layers=1, width=16, heads=2, context=64), tok, seed=1)
    model = ResidualLM(base, phi).eval()
    contexts = [[1, 5, 6], [1], [1, 7, 8, 9, 10]]

    def run(use_cache: bool):
        gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
        return generate(model, contexts, [6, 9, 4], gens, eos=2, pad=0, top_k=8, banned=[0], use_cache=use_cache)

    cached, slow = run(True), run(False)
    assert [g.tokens for g in cached] == [g.tokens for g in slow]
    assert [g.logprob for g in cached] == pytest.approx([g.logprob for g in slow], abs=1e-4)


def test_save_and_load_round_trip_gives_the_same_logits(pair, tmp_path):
    model, tok, meta = _ralm(pair)
    save_residual_lm(model, tok, meta, tmp_path / "ralm")
    loaded, tok2, meta2 = load_lm(tmp_path / "ralm")
    assert isinstance(loaded, ResidualLM) and meta2 == meta and tok2.get_vocab() == tok.get_vocab()
    ids = torch.tensor([SEQS[2]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    assert not any(p.requires_grad for p in loaded.base.parameters())
    spec = tmp_path / "ralm" / "residual_lm.json"
    spec.write_text(json.dumps({**json.loads(spec.read_text()), "base_parameters": "many"}))
    with pytest.raises(TextebmError, match="residual_lm.json.*base_parameters"):
        load_lm(tmp_path / "ralm")


def _tensor_files(folder: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(folder.iterdir()) if f.is_file()}


@pytest.fixture(scope="module")
def base_lm(data, tmp_path_factory) -> Path:  # noqa: F811
    """A base LM trained for one epoch only: far from what the toy corpus allows."""
    run = tmp_path_factory.mktemp("ralm-base") / "base"
    assert main(["lm", "train", "--data", str(data), "--out", str(run), "--epochs", "1", "--lr", "3e-3", *TINY]) == 0
    return run


SMALL = [a for a in TINY if a not in ("--vocab-size", "300")]  # phi takes the base's vocabulary


def test_lm_train_residual_of_learns_beyond_the_base_and_leaves_it_untouched(data, base_lm, tmp_path,  # noqa: F811
                                                                             capsys):
    base_run = tmp_path / "base"
    shutil.copytree(base_lm, base_run)  # this test changes and deletes its base
    before = _tensor_files(base_run / "model")
    ralm_run = tmp_path / "ralm"
    assert main(["lm", "train", "--data", str(data), "--out", str(ralm_run), "--residual-of", str(base_run),
                 "--epochs", "4", "--lr", "3e-3", *SMALL]) == 0
    assert _tensor_files(base_run / "model") == before  # the frozen base: byte-identical files
    base_m = json.loads((base_run / "metrics.json").read_text())
    m = json.loads((ralm_run / "metrics.json").read_text())
    # the same dev tokens (the base's tokenizer): the RALM must beat the base it sits on
    assert m["eval"]["dev_tokens"] == base_m["eval"]["dev_tokens"]
    assert m["eval"]["dev_perplexity"] < 0.5 * base_m["eval"]["dev_perplexity"]  # measured: 34.3 vs 154.9
    config = json.loads((ralm_run / "config.json").read_text())
    model, _, _ = load_lm(ralm_run)
    assert isinstance(model, ResidualLM)
    counts = model.parameter_counts()
    assert config["trainable_parameters"] == config["parameters"] == counts["trainable_parameters"]
    assert config["base_parameters"] == counts["base_parameters"] == base_m_params(base_run)
    # the loaded RALM scores dev as training's own evaluation did
    assert main(["lm", "eval", "--model", str(ralm_run), "--data", str(data), "--split", "dev",
                 "--metrics", str(tmp_path / "eval.json"), "--precision", "fp32"]) == 0
    ev = json.loads((tmp_path / "eval.json").read_text())["eval_dev"]
    assert ev["tokens"] == m["eval"]["dev_tokens"]
    assert ev["nll_per_token"] == pytest.approx(m["eval"]["dev_nll_per_token"], abs=1e-4)

    # the base changed since: refused, naming the description file
    weights = base_run / "model" / "model.safetensors"
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(weights))
    name = min(tensors)
    tensors[name] = tensors[name] + 1
    save_file(tensors, str(weights), metadata={"format": "pt"})
    assert main(["lm", "eval", "--model", str(ralm_run), "--data", str(data), "--split", "dev",
                 "--metrics", str(tmp_path / "eval2.json")]) == 2
    err = capsys.readouterr().err
    assert "residual_lm.json" in err and "changed" in err and "Traceback" not in err
    # the base gone: refused too
    shutil.rmtree(base_run)
    assert main(["lm", "eval", "--model", str(ralm_run), "--data", str(data), "--split", "dev",
                 "--metrics", str(tmp_path / "eval3.json")]) == 2
    err = capsys.readouterr().err
    assert "residual_lm.json" in err and "gone" in err


def base_m_params(run: Path) -> int:
    return json.loads((run / "config.json").read_text())["parameters"]


def test_a_ralm_resumed_after_ctrl_c_equals_an_uninterrupted_run(data, base_lm, tmp_path, monkeypatch):  # noqa: F811
    """The checkpoint holds phi (and the frozen base) with the optimizer: Ctrl-C at step 3, resumed
    from the checkpoint of step 2, ends with bitwise the weights of a run never stopped."""
    from safetensors.torch import load_file

    import textebm.train

    args = ["lm", "train", "--data", str(data), "--residual-of", str(base_lm), "--max-steps", "5", "--log-every",
            "1", "--checkpoint-every", "2", "--eval-split", "", "--lr", "3e-3", *SMALL]
    assert main([*args, "--out", str(tmp_path / "full")]) == 0
    logged, inner = [], textebm.train.group_lrs

    def interrupt_at_step_3(optimizer):  # the loop logs every step (--log-every 1)
        logged.append(1)
        if len(logged) == 3:
            raise KeyboardInterrupt
        return inner(optimizer)

    monkeypatch.setattr(textebm.train, "group_lrs", interrupt_at_step_3)
    assert main([*args, "--out", str(tmp_path / "cut")]) == 130
    monkeypatch.setattr(textebm.train, "group_lrs", inner)
    assert main([*args, "--out", str(tmp_path / "cut"), "--resume"]) == 0
    a = load_file(str(tmp_path / "full" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "cut" / "model" / "residual_lm.json").read_text())["base"] == str(
        (base_lm / "model").resolve())


def test_an_r2l_base_gives_an_r2l_ralm(data, tmp_path):  # noqa: F811
    """phi learns in the base's order: the RALM folder keeps the base's layout (r2l) for scoring and sampling."""
    base = make_tiny_lm(tmp_path / "r2l-base", direction="r2l")
    run = tmp_path / "r2l-ralm"
    assert main(["lm", "train", "--data", str(data), "--out", str(run), "--residual-of", str(base), "--direction",
                 "r2l", "--max-steps", "1", "--eval-split", "", *SMALL]) == 0
    model, _, meta = load_lm(run)
    assert isinstance(model, ResidualLM) and (meta.objective, meta.direction) == ("causal", "r2l")
