"""Paper d's control energy (`--energy lmstats`): E(x) linear in the frozen base LM's log-probability,
entropy and length over the continuation. Its features against a direct computation on a tiny LM,
its linearity, its precision and frozen base, a `detect train` run that learns to tell real text
from the base LM's samples at another temperature, save / load, `residual ppl` and `residual
generate` with it unchanged, and the bad combinations (exit 2 naming the option)."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
from conftest import walking_world, word_tokenizer

from textebm.cli import main
from textebm.errors import InputError
from textebm.models.build import SmallLMConfig, build_causal_lm
from textebm.models.lm import LMMeta
from textebm.models.seq_energy import LMStatsEnergy, build_energy, continuation_stats, spec_from_dict
from textebm.residual.joint import BaseLM

WORDS = ["a", "b", "c", "d", "e"]
P = 3  # prefix tokens


def toy_tokenizer():
    return word_tokenizer(WORDS)


@pytest.fixture(scope="module")
def toy():
    """A tiny random Llama over 5 words (+ <pad> <s> </s>), sharpened so that its distributions
    differ from position to position, and the lmstats energy over it (prefix of 3 tokens)."""
    torch.manual_seed(0)
    tok = toy_tokenizer()
    lm = build_causal_lm(SmallLMConfig(1, 16, 2, context=16), tok, seed=0).eval()
    with torch.no_grad():
        lm.lm_head.weight.mul_(4)
    base = BaseLM(lm, tok, LMMeta(bos_token="<s>", eos_token="</s>", pad_token="<pad>"), tok)
    energy = LMStatsEnergy(lm, P, base.sp.bos, list(base.banned))
    # right-padded windows of 7, 5 and 3 tokens: continuations of 4, 2 and none
    windows = [[3, 4, 6, 5, 7, 3, 3], [7, 7, 5, 4, 6], [3, 5, 4]]
    return {"tok": tok, "lm": lm, "base": base, "energy": energy, "windows": windows}


def _batch(windows):
    from textebm.data.batching import right_pad

    return right_pad(windows, 0)  # (B, T), (B, T)


def _by_hand(lm, bos: int, banned: list[int], window: list[int], p: int) -> list[float]:
    """[Σ log P, Σ entropy, length] over window[p:], each position read on its own ([bos] x_<t, no
    padding), float64, the banned tokens removed and the rest renormalised."""
    lp_sum = ent_sum = 0.0
    for t in range(p, len(window)):
        ids = torch.tensor([[bos, *window[:t]]])  # (1, 1 + t)
        with torch.no_grad():
            logits = lm(input_ids=ids).logits[0, -1].double()  # (V,)
        logits[banned] = float("-inf")
        probs = torch.softmax(logits, -1)  # (V,)
        lp_sum += math.log(float(probs[window[t]]))
        ent_sum += -sum(float(q) * math.log(float(q)) for q in probs if q > 0)
    return [lp_sum, ent_sum, float(max(0, len(window) - p))]


def test_features_equal_a_direct_computation_on_a_tiny_lm(toy):
    ids, mask = _batch(toy["windows"])
    want = torch.tensor([_by_hand(toy["lm"], toy["base"].sp.bos, list(toy["base"].banned), w, P)
                         for w in toy["windows"]], dtype=torch.float64)  # (3, 3)
    got = toy["energy"].features(ids, mask)  # (3, 3) fp32
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    assert want[2].abs().sum() == 0 and want[0, 1] > 0 and want[0, 0] < 0  # no continuation: zeros
    # in float64 the batched, padded pass is the direct one to rounding
    lm64 = copy.deepcopy(toy["lm"]).double()
    want64 = torch.tensor([_by_hand(lm64, toy["base"].sp.bos, list(toy["base"].banned), w, P)
                           for w in toy["windows"]], dtype=torch.float64)  # (3, 3)
    e64 = LMStatsEnergy(lm64, P, toy["base"].sp.bos, list(toy["base"].banned)).double()
    torch.testing.assert_close(e64.features(ids, mask), want64, atol=1e-10, rtol=1e-10)
    # one P_LM: Σ log P is BaseLM's log-probability of the continuation
    lp = toy["base"].continuation_logprobs([toy["windows"][0][:P]], [toy["windows"][0][P:]])  # (1, 4)
    assert abs(float(lp.sum()) - float(want[0, 0])) < 1e-5


def test_continuation_stats_by_hand():
    """Two positions over 3 tokens, token 2 banned: uniform over the other two, then 3:1."""
    logits = torch.tensor([[[0.0, 0.0, 5.0], [math.log(3.0), 0.0, 1.0]]])  # (1, 2, 3)
    f = continuation_stats(logits.double(), torch.tensor([[0, 1]]), torch.ones(1, 2), torch.tensor([2]))
    h2 = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    torch.testing.assert_close(f, torch.tensor([[math.log(0.5) + math.log(0.25), math.log(2) + h2, 2.0]],
                                               dtype=torch.float64))
    with pytest.raises(ValueError, match="never writes"):  # a banned token in a real continuation
        continuation_stats(logits, torch.tensor([[2, 1]]), torch.ones(1, 2), torch.tensor([2]))


def test_energy_is_exactly_linear_in_the_features(toy):
    en = LMStatsEnergy(copy.deepcopy(toy["lm"]), P, toy["base"].sp.bos, list(toy["base"].banned)).double()
    ids, mask = _batch(toy["windows"])
    with torch.no_grad():
        en.weight.copy_(torch.tensor([-0.7, 0.3, 0.05], dtype=torch.float64))
        en.bias.fill_(1.5)
    f = en.features(ids, mask)  # (3, 3)
    e = en(ids, mask)  # (3,)
    by_hand = torch.stack([-0.7 * f[i, 0] + 0.3 * f[i, 1] + 0.05 * f[i, 2] + 1.5 for i in range(3)])
    torch.testing.assert_close(e, by_hand, atol=1e-12, rtol=0)
    # the gradient is the features (and 1 for the bias), and only the 4 parameters train
    e.sum().backward()
    torch.testing.assert_close(en.weight.grad, f.sum(0))
    assert float(en.bias.grad) == 3.0
    assert [n for n, p in en.named_parameters() if p.requires_grad] == ["weight", "bias"]
    # as a function of (w, b) on fixed features: gradcheck in float64
    assert torch.autograd.gradcheck(lambda w, b: f @ w + b, (torch.randn(3, dtype=torch.float64, requires_grad=True),
                                                             torch.randn((), dtype=torch.float64, requires_grad=True)))


def test_the_base_lm_stays_frozen_in_eval_mode_and_fp32(toy):
    from textebm.models.mixed import mixed_precision

    ids, mask = _batch(toy["windows"])
    ref = toy["energy"].features(ids, mask)
    tok, base = toy["tok"], toy["base"]
    lm = build_causal_lm(SmallLMConfig(1, 16, 2, context=16), tok, seed=0)
    lm.load_state_dict(toy["lm"].state_dict())
    lm.config.attention_dropout = 0.5
    en = LMStatsEnergy(lm, P, base.sp.bos, list(base.banned)).train()  # what the training loop asks
    assert not en.lm.training and en.training
    mixed_precision(en, torch.bfloat16, "cast")  # what load_energy does for --precision bf16
    assert all(p.dtype == torch.float32 for p in en.lm.parameters())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(en.features(ids, mask), ref, atol=1e-6, rtol=1e-6)


def test_spec_needs_one_prefix_and_the_bos(tmp_path):
    raw = {"kind": "lmstats", "vocab_size": 8, "length": 7, "contexts": [3, 4], "bos_id": 1}
    with pytest.raises(InputError, match="one prefix length"):
        spec_from_dict(raw, tmp_path / "energy.json")
    spec = spec_from_dict({**raw, "contexts": [3], "banned": [0, 2]}, tmp_path / "energy.json")
    with pytest.raises(ValueError, match="base LM"):
        build_energy(spec)


# ---------------------------------------------------------------- from the command line


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny corpus, its vocabulary, a base LM trained 20 steps by `lm train`, and windows of 14 + 6
    tokens whose 2 negatives the base LM wrote untruncated at temperature 2: a difference in
    temperature alone, which re-tempering the base LM can learn."""
    world = walking_world(tmp_path_factory.mktemp("lmstats"), "--temperature", "2")
    root, base = world["root"], world["base"]
    return {"root": root, "data": root / "data", "vocab": root / "vocab", "base": base,
            "train": root / "train.jsonl", "dev": root / "dev.jsonl"}


def _train(world, out, *extra):
    return main(["detect", "train", "--train", str(world["train"]), "--val", str(world["dev"]), "--vocab",
                 str(world["vocab"]), "--loss", "bce", "--negatives", "random", "--out", str(out), "--no-progress",
                 *extra])


@pytest.fixture(scope="module")
def control(world):
    run = world["root"] / "control"
    assert _train(world, run, "--energy", "lmstats", "--base", str(world["base"]), "--epochs", "10",
                  "--batch-size", "8", "--lr", "0.05", "--log-every", "6") == 0  # 60 steps
    return run


def test_residual_train_lmstats_learns_a_temperature(world, control):
    m = json.loads((control / "metrics.json").read_text())
    losses = [h["loss"] for h in m["train"]["history"]]
    assert len(losses) == 10 and losses[-1] < 0.5 * losses[0]  # from 2 log 2 at zero weights
    assert m["eval"]["val_auroc"] > 0.8  # chance: 0.5
    cfg = json.loads((control / "config.json").read_text())
    assert cfg["parameters"] == 4 and cfg["spec"]["kind"] == "lmstats"
    spec = json.loads((control / "model" / "energy.json").read_text())
    assert spec["contexts"] == [14] and spec["init"] == str(world["base"]) and 2 in spec["banned"]
    from safetensors.torch import load_file

    w = load_file(control / "model" / "model.safetensors")["weight"]
    assert float(w[0]) < 0  # hotter samples are less likely under P_LM: a higher log-probability lowers E


def test_lmstats_saves_and_loads_back_with_identical_energies(world, tmp_path):
    from transformers import AutoTokenizer

    from textebm.detection.train import EnergyBuildSpec, build_energy_model
    from textebm.models.load import load_energy, load_lm
    from textebm.models.seq_energy import encode_windows, save_energy

    vocab = AutoTokenizer.from_pretrained(world["vocab"])
    model, spec, tok = build_energy_model(EnergyBuildSpec(energy="lmstats", base=str(world["base"]), prefix_len=14),
                                          vocab, 20)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([-0.3, 0.2, 0.1]))
        model.bias.fill_(-0.4)
    save_energy(model.eval(), spec, tok, tmp_path / "e")
    loaded, spec2, _, _ = load_energy(tmp_path / "e")
    assert spec2 == spec and isinstance(loaded, LMStatsEnergy) and loaded.prefix_len == 14
    base = BaseLM(*load_lm(world["base"]), vocab)  # one P_LM: the joint model's [bos] and banned tokens
    assert spec.bos_id == base.sp.bos and tuple(spec.banned) == base.banned
    rows = [json.loads(x) for x in world["dev"].read_text().splitlines()][:4]
    batch = encode_windows([s for r in rows for s in (r["positive"], *r["negatives"])], spec, tok, vocab)
    with torch.no_grad():
        assert torch.equal(model(**batch), loaded(**batch))
    loaded16, _, _, _ = load_energy(tmp_path / "e", dtype=torch.bfloat16)  # the base LM stays fp32
    with torch.no_grad():
        assert torch.equal(model(**batch), loaded16(**batch))


def test_residual_ppl_and_generate_take_the_control_unchanged(world, control, tmp_path, capsys):
    """This control learned negatives at temperature 2, not P_LM's: the joint commands refuse it,
    naming the temperature. The same energy recorded as trained on P_LM's own samples (its run's
    negatives file rewritten to say temperature 1) is taken as it is."""
    args = ["--base", str(world["base"]), "--data", str(world["data"]), "--no-progress"]
    out = tmp_path / "ppl"
    assert main(["residual", "ppl", *args, "--energy", str(control), "--windows", "3", "--samples", "6", "--out",
                 str(out)]) == 2
    assert "temperature 2.0" in capsys.readouterr().err and not out.exists()
    import shutil

    control = shutil.copytree(control, tmp_path / "control")
    rows = [{**json.loads(x), "temperature": 1.0} for x in world["train"].read_text().splitlines()]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = json.loads((control / "config.json").read_text())
    (control / "config.json").write_text(json.dumps({**cfg, "train": [str(tmp_path / "train.jsonl")]}))
    assert main(["residual", "ppl", *args, "--energy", str(control), "--windows", "3", "--samples", "6", "--out",
                 str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["models"][0]["kind"] == "lmstats" and np.isfinite(m["models"][0]["joint_ppl_upper"])
    gen = tmp_path / "gen"
    assert main(["residual", "generate", *args, "--energy", str(control), "--windows", "2", "--n", "4", "--top-k",
                 "4", "--out", str(gen)]) == 0
    rows = [json.loads(x) for x in (gen / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(len(r["ids"]["joint"]) == 6 for r in rows)


@pytest.mark.parametrize("extra, names", [
    (["--energy", "lmstats"], "--base"),  # no base LM
    (["--energy", "linear", "--base", "BASE"], "--base"),  # a base LM for an energy that reads none
    (["--energy", "lmstats", "--base", "BASE", "--layers", "3"], "--layers"),
    (["--energy", "lmstats", "--base", "OTHER"], "--base"),  # another vocabulary than the windows'
    (["--energy", "lmstats", "--base", "BASE", "--train", "MIXED"], "--train"),  # two prefix lengths
    (["--energy", "lmstats", "--base", "BASE", "--train", "R2L"], "--train"),  # generated before the context
])
def test_bad_combinations_exit_2_naming_the_option(world, tmp_path, capsys, extra, names):
    if "OTHER" in extra and not (world["root"] / "other").exists():
        assert main(["lm", "train", "--data", str(world["data"]), "--vocab-size", "280", "--layers", "1", "--width",
                     "16", "--heads", "2", "--context", "48", "--chunk", "32", "--max-steps", "1", "--batch-size", "4",
                     "--out", str(world["root"] / "other"), "--no-progress", "--eval-split", ""]) == 0
    rows = [json.loads(x) for x in world["train"].read_text().splitlines()]
    for name, change in (("MIXED", {"context_len": 12}), ("R2L", {"direction": "r2l"})):
        (tmp_path / name).write_text("".join(json.dumps({**r, **(change if i == 0 else {})}) + "\n"
                                             for i, r in enumerate(rows)))
    paths = {"BASE": str(world["base"]), "OTHER": str(world["root"] / "other"), "MIXED": str(tmp_path / "MIXED"),
             "R2L": str(tmp_path / "R2L")}
    args = [paths.get(a, a) for a in extra]
    if "--train" in args:  # the later --train replaces the fixture's
        i = args.index("--train")
        rest, train = args[:i] + args[i + 2:], args[i + 1]
        rc = main(["detect", "train", "--train", train, "--val", str(world["dev"]), "--vocab", str(world["vocab"]),
                   "--out", str(tmp_path / "o"), "--no-progress", *rest])
    else:
        rc = _train(world, tmp_path / "o", *args)
    assert rc == 2
    err = capsys.readouterr().err
    assert names in err, err
    assert not (tmp_path / "o" / "model").exists()


def test_a_control_reads_its_base_by_the_runs_record_or_by_its_weights(world, control):
    """A base LM with random rows added on load (a fetched model given a pad token) never holds the
    control's copy of its weights: the run's record of --base's content decides first; without a
    matching record, the weights do."""
    from textebm.models.load import load_energy, load_lm
    from textebm.residual.joint import reads_base

    base = world["base"] / "model"
    model, _, _, _ = load_energy(control / "model")
    lm = load_lm(base)[0]
    assert reads_base(control / "model", model, base, lm)
    with torch.no_grad():
        lm.get_input_embeddings().weight[0] += 1.0  # other weights, the same folder (record) still
    assert reads_base(control / "model", model, base, lm)
    assert not reads_base(control / "model", model, world["root"] / "data", lm)  # another folder, other weights
