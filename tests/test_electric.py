"""Electric (Clark et al. 2020): the two estimators against hand computations, ELECTRA's token
scores, the two-tower noise model, and `cloze train` end to end with kill and resume."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from forked import run_main

from textebm.cli import main
from textebm.losses.electric import (electra_rtd, electra_token_log_prob, electric_nce, electric_nce_naive,
                                     num_replaced)

# One sequence of n = 4 real tokens (position 0 and 5 are framing, 6 is padding), k = 1 replaced.
E = torch.tensor([[0.0, 0.3, -1.2, 0.8, 2.0, 0.0, 0.0]], dtype=torch.float64)  # energies in x^noised
LQ = torch.log(torch.tensor([[1.0, 0.20, 0.05, 0.40, 0.10, 1.0, 1.0]], dtype=torch.float64))  # log q(x^noised_t|x\t)
REAL = torch.tensor([[False, True, True, True, True, False, False]])
R = torch.tensor([[False, False, False, True, False, False, False]])


def test_algorithm_2_equals_the_paper_by_hand():
    n, k = 4, 1
    total = 0.0
    for t in range(1, 5):
        p, q = math.exp(-E[0, t].item()), math.exp(LQ[0, t].item())
        if R[0, t]:
            total += -math.log(k * q / ((n - k) * p + k * q))
        else:
            total += -math.log((n - k) * p / ((n - k) * p + k * q))
    out = electric_nce(E, LQ, R, REAL)
    assert out.loss.item() == pytest.approx(total, rel=1e-6)
    assert out.acc_noise.item() == float(-E[0, 3] - LQ[0, 3] - math.log(1 / 3) <= 0)


def test_algorithm_1_equals_the_paper_by_hand_and_differs_from_algorithm_2():
    n, k = 4, 2
    e_clean = torch.tensor([[0.0, 0.3, -1.2, 0.1, 2.0, 0.0, 0.0]], dtype=torch.float64)  # E(x)_t, clean x
    lq_clean = torch.log(torch.tensor([[1.0, 0.2, 0.05, 0.3, 0.1, 1.0, 1.0]], dtype=torch.float64))
    e_noise = torch.tensor([[0.9, -0.4, 7.0]], dtype=torch.float64)  # the third is absent (mask False)
    lq_noise = torch.log(torch.tensor([[0.25, 0.01, 0.5]], dtype=torch.float64))
    noise_mask = torch.tensor([[True, True, False]])
    total = 0.0
    for t in range(1, 5):
        p, q = math.exp(-e_clean[0, t].item()), math.exp(lq_clean[0, t].item())
        total += -math.log(n * p / (n * p + k * q))
    for j in range(2):
        p, q = math.exp(-e_noise[0, j].item()), math.exp(lq_noise[0, j].item())
        total += -math.log(k * q / (n * p + k * q))
    out = electric_nce_naive(e_clean, lq_clean, REAL, e_noise, lq_noise, noise_mask)
    assert out.loss.item() == pytest.approx(total, rel=1e-6)
    # The efficient estimator on the same numbers (positions 1 and 2 as R) is another quantity.
    r2 = torch.tensor([[False, True, True, False, False, False, False]])
    assert electric_nce(e_clean, lq_clean, r2, REAL).loss.item() != pytest.approx(total, rel=1e-3)


def test_algorithm_2_gradcheck_and_sequences_without_both_classes():
    e = E.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: electric_nce(x, LQ, R, REAL).loss, (e,))
    # A second sequence with a single real token (k = 0) adds nothing.
    e2 = torch.cat([E, E]), torch.cat([LQ, LQ])
    real2 = torch.cat([REAL, torch.tensor([[False, True, False, False, False, False, False]])])
    r2 = torch.cat([R, torch.zeros_like(R)])
    assert electric_nce(e2[0], e2[1], r2, real2).loss.item() == pytest.approx(electric_nce(E, LQ, R, REAL).loss.item())


def test_electra_scores_invert_its_posterior():
    """With s_t = log σ⁻¹ of P(replaced) = k q / ((n−k) p + k q), the token score recovers log p."""
    n, k = torch.tensor([7]), torch.tensor([2])
    log_p = torch.tensor([[-2.0, -0.5, -4.0]], dtype=torch.float64)
    log_q = torch.tensor([[-1.0, -3.0, -0.2]], dtype=torch.float64)
    post = k * log_q.exp() / ((n - k) * log_p.exp() + k * log_q.exp())  # P(replaced)
    s = torch.log(post / (1 - post))
    torch.testing.assert_close(electra_token_log_prob(log_q, s, n, k).double(), log_p, rtol=1e-5, atol=1e-5)
    loss, acc, count = electra_rtd(torch.tensor([[2.0, -1.0, 0.5]]), torch.tensor([[True, False, False]]),
                                   torch.tensor([[True, True, True]]))
    assert count.item() == 3
    expected = -math.log(1 / (1 + math.exp(-2))) - math.log(1 / (1 + math.exp(-1))) - math.log(1 / (1 + math.exp(0.5)))
    assert loss.item() == pytest.approx(expected, rel=1e-6) and acc.item() == pytest.approx(2 / 3)


def test_num_replaced_is_ceil_fraction_within_1_and_n_minus_1():
    n = torch.tensor([0, 1, 2, 6, 7, 20, 100])
    assert num_replaced(n, 0.15).tolist() == [0, 0, 1, 1, 2, 3, 15]


def test_choose_positions_picks_k_unique_real_positions():
    from textebm.cloze.train import choose_positions

    real = torch.zeros(3, 30, dtype=torch.bool)
    real[0, 1:21] = True
    real[1, 1:8] = True
    real[2, 1:3] = True
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(30)
    for _ in range(300):
        r = choose_positions(real, 0.15, g)
        assert r.sum(1).tolist() == [3, 2, 1] and not (r & ~real).any()
        counts += r[0].float()
    assert counts[1:21].min() > 20  # every real position gets chosen, roughly uniformly (45 expected)


def _tiny_model(objective: str, vocab: int = 40):
    from textebm.models.build import SmallLMConfig, build_encoder
    from textebm.models.cloze import ClozeModel, ClozeSpec, scaled_tower
    from textebm.tokenizer import train_tokenizer

    tok = train_tokenizer([f"w{i} w{i * 7 % 13} w{i % 5}" for i in range(60)], vocab_size=vocab, kind="wordpiece")
    enc = build_encoder(SmallLMConfig(layers=1, width=32, heads=2, context=64), tok)
    enc.pooler = None
    tower = scaled_tower(width=32, ffn=128, heads=2, layers=1, scale=0.5)
    spec = ClozeSpec(objective=objective, vocab_size=len(tok), start_id=tok.bos_token_id, end_id=tok.eos_token_id,
                     pad_id=tok.pad_token_id, mask_id=tok.mask_token_id, tower=tower.__dict__, embedding_dim=32,
                     context=64)
    torch.manual_seed(0)
    return ClozeModel(None if objective == "twotower" else enc, spec), tok


def _batch(tok, n=3, length=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, len(tok), (n, length), generator=g)
    ids[:, 0] = tok.bos_token_id
    attn = torch.ones_like(ids)
    for b, L in enumerate([length, length - 2, length - 4][:n]):
        ids[b, L - 1] = tok.eos_token_id
        ids[b, L:] = tok.pad_token_id
        attn[b, L:] = 0
    return {"input_ids": ids, "attention_mask": attn}


def test_two_tower_q_is_normalised_and_never_sees_the_token_it_predicts():
    model, tok = _tiny_model("electric")
    model.eval()
    batch = _batch(tok)
    ids, attn = batch["input_ids"], batch["attention_mask"]
    lq = model.noise_log_probs(ids, attn)  # (B, T, V)
    torch.testing.assert_close(lq.exp().sum(-1), torch.ones(lq.shape[:2]))
    assert (lq[..., [tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.mask_token_id]] == -math.inf).all()
    for t in range(1, 8):
        changed = ids.clone()
        changed[0, t] = 6 + (changed[0, t] - 5) % (len(tok) - 6)
        lq2 = model.noise_log_probs(changed, attn)
        torch.testing.assert_close(lq2[0, t], lq[0, t])  # q(. | x_\t) ignores x_t
        assert not torch.allclose(lq2[0], lq[0])  # and the other positions do see it


def test_no_nce_gradient_reaches_the_noise_model():
    """L_NCE trains the Electric encoder and head; the towers get gradient from L_MLE only."""
    from textebm.cloze.train import cloze_losses

    for objective, estimator in (("electric", "efficient"), ("electric", "naive"), ("electra", "efficient")):
        model, tok = _tiny_model(objective)
        parts = cloze_losses(model, _batch(tok), torch.Generator().manual_seed(1), estimator)
        parts["loss_disc"].backward()
        tower = [(n, p) for n, p in model.named_parameters() if n.startswith("noise.") and "embed" not in n]
        assert tower and all(p.grad is None or not p.grad.any() for _, p in tower), objective
        assert model.head.weight.grad.abs().sum() > 0
        model.zero_grad()
        parts = cloze_losses(model, _batch(tok), torch.Generator().manual_seed(1), estimator)
        parts["loss_mle"].backward()
        assert any(p.grad is not None and p.grad.any() for _, p in tower)
        assert model.head.weight.grad is None or not model.head.weight.grad.any()


def test_efficient_loss_is_algorithm_2_on_the_sampled_positions():
    """cloze_losses' NCE term equals electric_nce recomputed from the same draws."""
    from textebm.cloze.train import choose_positions, cloze_losses, sample_tokens
    from textebm.models.cloze import real_positions

    model, tok = _tiny_model("electric")
    model.eval()
    batch = _batch(tok)
    parts = cloze_losses(model, batch, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    ids, attn = batch["input_ids"], batch["attention_mask"]
    real = real_positions(ids, attn)
    lq = model.noise_log_probs(ids, attn)
    r = choose_positions(real, 0.15, g)
    noised = torch.where(r, sample_tokens(lq, g), ids)
    e = model.token_scores(noised, attn)
    ref = electric_nce(e, lq.gather(-1, noised[..., None]).squeeze(-1), r, real).loss / real.sum()
    torch.testing.assert_close(parts["loss_disc"], ref)


@pytest.mark.parametrize("objective", ["electric", "electra"])
def test_evaluation_weights_accuracy_by_the_positions_that_took_part(objective):
    """One-token texts have no replaced position (k = 0): a batch of only such texts adds nothing
    to the accuracy, instead of turning the whole evaluation into NaN."""
    from textebm.cloze.train import evaluate_cloze

    model, tok = _tiny_model(objective)
    s, e = model.spec.start_id, model.spec.end_id
    short = [[s, 7, e]] * 4  # one real token each
    longer = [[s, *range(6, 6 + n), e] for n in (5, 6, 7, 8)]
    key = f"dev_{'nce' if objective == 'electric' else 'rtd'}_accuracy"
    only_short = evaluate_cloze(model, short, batch_size=4, seed=0, split="dev")
    assert only_short[key] is None and math.isfinite(only_short["dev_noise_perplexity"])
    mixed = evaluate_cloze(model, short + longer, batch_size=4, seed=0, split="dev")
    assert mixed[key] is not None and math.isfinite(mixed[key])  # was NaN: the short batch's 0/0


@pytest.mark.parametrize("objective", ["electric", "electra", "mlm"])
def test_a_batch_of_one_token_texts_logs_no_accuracy_and_no_nan(objective):
    """One-token texts have no replaced or masked position (k <= n - 1): the batch's losses are 0,
    and its accuracy (NCE: 0/0 = NaN; RTD: 0) is left out of the log instead of averaged in."""
    from textebm.cloze.train import ClozeObjective, cloze_step

    model, tok = _tiny_model(objective)
    s, e = model.spec.start_id, model.spec.end_id
    ids = torch.tensor([[s, 7, e], [s, 8, e]])
    loss, logs = cloze_step(ClozeObjective(model), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, 1.0,
                            50.0)
    assert math.isfinite(float(loss.detach())) and all(math.isfinite(v) for v in logs.values()), logs
    assert not {"nce_acc", "rtd_acc"} & set(logs)
    assert logs.get("loss_mlm", logs.get("loss_disc")) == 0.0


def test_special_token_strings_in_training_text_are_plain_text():
    """"<mask>" or "[SEP]" in a training text is its characters, not the mask or framing token
    (q gives those probability 0: an infinite loss)."""
    from transformers import BertTokenizer

    from textebm.cloze.train import encode_texts

    model, tok = _tiny_model("electric")
    spec = model.spec
    special = {spec.start_id, spec.end_id, spec.pad_id, spec.mask_id}
    for x in encode_texts(tok, spec, ["w1 <mask> w2", "</s>", "<s> <pad>"]):
        assert not special & set(x[1:-1]), tok.convert_ids_to_tokens(x)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[", "]", "the", "mask", "sep"]
    bert = BertTokenizer(vocab={w: i for i, w in enumerate(words)})
    bert_spec = SimpleNamespace(start_id=2, end_id=3, max_len=16)
    assert encode_texts(bert, bert_spec, ["the [MASK] [SEP]"]) == [[2, 7, 5, 8, 6, 5, 9, 6, 3]]


def test_a_diverged_loss_stops_with_the_message_alone():
    """The loop's NaN check reads a loss that requires grad without torch's warning about it."""
    import warnings

    from textebm.errors import TrainingDiverged
    from textebm.train import _check_finite

    loss = torch.tensor(float("nan"), requires_grad=True) * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TrainingDiverged, match="loss is nan at step 3"):
            _check_finite(loss, 2, SimpleNamespace(num_processes=1))


def _texts_dataset(path: Path, splits: dict[str, list[str]]) -> Path:
    path.mkdir(parents=True)
    for split, texts in splits.items():
        (path / f"{split}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def test_cloze_train_with_one_token_texts_keeps_its_history_strict_json(tmp_path):
    """Batches of only one-token texts (bucketed by length) log no NCE accuracy: metrics.json has
    no NaN (strict JSON), and the other batches keep theirs."""
    long = [f"the {n} sees the {m} ." for n in ("cat", "dog", "cow") for m in ("bird", "fish", "cat")][:8]
    data = _texts_dataset(tmp_path / "data", {"train": ["cat", "dog", "bird", "fish"] * 2 + long, "dev": long[:4]})
    out = tmp_path / "run"
    assert main(["cloze", "train", "--data", str(data), "--out", str(out), "--objective", "electric", "--epochs", "1",
                 "--log-every", "1", "--eval-split", "", "--batch-size", "4", *TINY[:8], *TINY[10:]]) == 0

    def refuse(name):
        raise AssertionError(f"{name} in metrics.json")

    history = json.loads((out / "metrics.json").read_text(), parse_constant=refuse)["train"]["history"]
    assert len(history) == 4 and any("nce_acc" not in h for h in history) and any("nce_acc" in h for h in history)


def test_cloze_train_refuses_splits_it_cannot_learn_or_evaluate_on(tmp_path, capsys):
    """Before any training: a split whose every text has no token (zero-width spaces) names its file;
    so does a training or a dev split of only one-token texts (no position to learn or validate at:
    a dev loss of 0 would pick the first epoch)."""
    long = ["the cat sees the bird .", "the dog eats the fish ."] * 4
    args = ["--objective", "electric", "--max-steps", "2", *TINY]
    zw = _texts_dataset(tmp_path / "zw", {"train": long, "dev": ["\u200b", "\u200b\u200b"]})
    assert main(["cloze", "train", "--data", str(zw), "--out", str(tmp_path / "a"), *args]) == 2
    err = capsys.readouterr().err
    assert f"{zw / 'dev.jsonl'}: no text of the dev split" in err and "Traceback" not in err, err
    assert not (tmp_path / "a" / "model").exists()
    one = _texts_dataset(tmp_path / "one", {"train": ["cat", "dog", "bird"] * 4, "dev": long})
    assert main(["cloze", "train", "--data", str(one), "--out", str(tmp_path / "b"), *args]) == 2
    err = capsys.readouterr().err
    assert f"{one / 'train.jsonl'}: every text of the train split is one token long" in err, err
    assert not (tmp_path / "b" / "model").exists()
    one_dev = _texts_dataset(tmp_path / "one-dev", {"train": long, "dev": ["cat", "dog"]})
    assert main(["cloze", "train", "--data", str(one_dev), "--out", str(tmp_path / "c"), *args]) == 2
    assert f"{one_dev / 'dev.jsonl'}: every text of the dev split is one token long" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def _corpus(path: Path, n_train=160) -> Path:
    rng = random.Random(0)
    nouns, verbs = "cat dog bird fish cow".split(), "sees eats likes finds".split()
    path.mkdir(parents=True)
    for split, n in (("train", n_train), ("dev", 30), ("test", 10)):
        with open(path / f"{split}.jsonl", "w") as f:
            for i in range(n):
                s = f"the {rng.choice(nouns)} {rng.choice(verbs)} the {rng.choice(nouns)} ."
                f.write(json.dumps({"id": f"{split}-{i}", "text": s}) + "\n")
    return path


TINY = ["--layers", "1", "--width", "32", "--heads", "2", "--vocab-size", "64", "--batch-size", "16",
        "--no-progress", "--precision", "fp32", "--lr", "3e-3"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return _corpus(tmp_path_factory.mktemp("cloze") / "data")


@pytest.mark.parametrize("objective", ["electric", "electra", "mlm", "twotower"])
def test_cloze_train_learns_and_saves(corpus, tmp_path, objective):
    """Every objective trains from scratch on a toy grammar, writes a loadable model and beats its
    starting point on dev (the noise model's perplexity, or the masked LM's)."""
    from textebm.models.load import load_cloze

    out = tmp_path / objective
    assert main(["cloze", "train", "--data", str(corpus), "--out", str(out), "--objective", objective,
                 "--epochs", "6", *TINY]) == 0
    m = json.loads((out / "metrics.json").read_text())
    ev = m["eval"]
    key = {"mlm": "dev_masked_perplexity", "twotower": "dev_perplexity"}.get(objective, "dev_noise_perplexity")
    # 6 nouns/verbs + fixed words: near-deterministic given both sides (a vocabulary of 64 at the
    # start); the masked LM's 60 steps depend on its mask draws: 4.61 on a CPU, 5.00 on an H200
    assert ev[key] < (6.0 if objective == "mlm" else 5.0), ev
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["compute"]["flops_per_token"] > 0 and cfg["compute"]["steps"] == 60
    model, tok = load_cloze(out)
    assert model.spec.objective == objective
    if objective == "electric":
        assert ev["dev_nce_accuracy"] > 0.7, ev
    if objective == "electra":
        assert ev["dev_rtd_accuracy"] > 0.8, ev


def test_mlm_keep_best_ends_with_the_epoch_of_lowest_masked_nll(corpus, tmp_path):
    """cloze train --keep-best: the masked tokens' dev NLL after every epoch (log of the masked
    perplexity `evaluate` reports); the run ends with the lowest's weights, whose figure the final
    evaluation reproduces."""
    out = tmp_path / "best"
    assert main(["cloze", "train", "--data", str(corpus), "--out", str(out), "--objective", "mlm", "--epochs", "4",
                 "--keep-best", "--patience", "1", *TINY]) == 0
    m = json.loads((out / "metrics.json").read_text())
    val, kept = m["train"]["validation"], m["train"]["kept"]
    assert len(val) >= 2 and kept == min(val, key=lambda v: v["loss"])
    assert math.log(m["eval"]["dev_masked_perplexity"]) == pytest.approx(kept["loss"], abs=1e-9)


def test_flops_budget_sets_the_steps(corpus, tmp_path):
    """--flops sets the steps of the run, not of the caller's config (a Python caller's is unchanged)."""
    import dataclasses

    from textebm.cli import build_parser
    from textebm.cli.args import dataclass_from_namespace
    from textebm.cloze.train import cloze_train

    out = tmp_path / "budget"
    ns = build_parser().parse_args(["cloze", "train", "--data", str(corpus), "--out", str(out), "--objective",
                                    "twotower", "--flops", "2e8", "--eval-split", "", *TINY])
    cfg = dataclass_from_namespace(ns._cls, ns)
    before = dataclasses.asdict(cfg)
    cloze_train(cfg)
    assert dataclasses.asdict(cfg) == before
    c = json.loads((out / "config.json").read_text())["compute"]
    assert abs(c["train_flops"] - 2e8) < c["train_flops"] / c["steps"] + 1  # within one step of the budget


def test_cloze_train_resumed_after_a_kill_equals_an_uninterrupted_run(corpus, tmp_path):
    args = ["cloze", "train", "--data", str(corpus), "--objective", "electric",
            "--epochs", "2", "--checkpoint-every", "4", "--eval-split", "", *TINY]
    env = {"OMP_NUM_THREADS": "1"}
    full = run_main("textebm.cli", [*args, "--out", str(tmp_path / "full")], env)
    assert full.returncode == 0, full.stderr
    cut = run_main("kill_at_step", ["10", *args, "--out", str(tmp_path / "cut")], env, entry="run")
    assert cut.returncode == 137 and not (tmp_path / "cut" / "model").exists()
    resumed = run_main("textebm.cli", [*args, "--out", str(tmp_path / "cut"), "--resume"], env)
    assert resumed.returncode == 0, resumed.stderr
    a = load_file(str(tmp_path / "full" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cloze_train_from_a_pretrained_encoder_folder(classify_fixture, corpus, tmp_path):
    """--init takes an encoder folder (the test's tiny BERT stands in for MiniLM): its weights are
    the starting point, the heads and towers start fresh."""
    from textebm.models.load import load_cloze, load_encoder

    enc, _ = load_encoder(classify_fixture / "encoder")
    out = tmp_path / "init"
    assert main(["cloze", "train", "--data", str(corpus), "--out", str(out), "--init",
                 str(classify_fixture / "encoder"), "--max-steps", "2", "--no-progress", "--precision", "fp32",
                 "--eval-split", ""]) == 0
    model, _ = load_cloze(out)
    assert model.encoder.config.hidden_size == enc.config.hidden_size
    w0 = enc.embeddings.position_embeddings.weight
    w1 = model.encoder.embeddings.position_embeddings.weight
    assert (w1 - w0).abs().max() < 0.01  # two small steps away from the pretrained weights
    assert np.isfinite(json.loads((out / "metrics.json").read_text())["train"]["history"][-1]["loss"])


def test_two_processes_train_electric(corpus, tmp_path):
    """`accelerate launch` with 2 CPU processes (gloo): the shared embedding, the towers' parameter
    group and the objective module train under DDP, and the model is saved once."""
    from test_distributed import _run, free_port
    from textebm.models.load import load_cloze

    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
           str(free_port()), "-m", "textebm", "cloze", "train", "--data", str(corpus), "--out", str(out),
           "--objective", "electric", "--max-steps", "4", "--eval-split", "", *TINY]
    res = _run(cmd, None, tmp_path / "hf_home")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((out / "metrics.json").read_text())["completed"]
    model, _ = load_cloze(out)
    assert model.spec.objective == "electric"
    # the inputs' content, hashed by the main process and broadcast, is what one process records
    from textebm.train import INPUTS_KEY, input_hashes

    recorded = json.loads((out / "config.json").read_text())[INPUTS_KEY]
    assert recorded == input_hashes(SimpleNamespace(data=str(corpus))) and set(recorded) == {"data"}
