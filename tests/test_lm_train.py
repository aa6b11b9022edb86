"""`lm train` and the sequence layouts it trains on: infill masking statistics (paper a, sec. 2.4),
the causal / r2l / infill layouts, and the command end to end, including resume after a kill
with infill masks drawn from the checkpointed random state."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from forked import run_main

from textebm.cli import main
from textebm.models.lm_format import IGNORE_INDEX, SpecialIds, causal_example, infill_example, mask_tokens

SP = SpecialIds(bos=1, eos=2, pad=0, mask=3, sep=4)


@pytest.mark.parametrize("ratio", [0.15, 0.4, 0.7])
def test_mask_rate_is_near_m_over_many_tokens(ratio):
    g = torch.Generator().manual_seed(0)
    ids = list(range(10, 60010))  # 60k tokens: the rate's standard deviation is below 0.002
    decisions, masked = mask_tokens(ids, ratio, g)
    assert abs(sum(decisions) / len(ids) - ratio) < 0.01
    # Every run of masked tokens becomes exactly one placeholder, kept tokens stay in order.
    runs = sum(1 for i, d in enumerate(decisions) if d and (i == 0 or not decisions[i - 1]))
    assert masked.count(-1) == runs
    assert all(not (a == -1 and b == -1) for a, b in zip(masked, masked[1:]))
    assert [t for t in masked if t != -1] == [t for t, d in zip(ids, decisions) if not d]


def test_masks_are_independent_per_token():
    """P(mask | previous masked) equals P(mask): no spans are drawn, tokens are masked independently."""
    g = torch.Generator().manual_seed(1)
    decisions, _ = mask_tokens(list(range(60000)), 0.4, g)
    after_masked = [b for a, b in zip(decisions, decisions[1:]) if a]
    assert abs(sum(after_masked) / len(after_masked) - 0.4) < 0.015


def test_layouts():
    x = [11, 12, 13]
    assert causal_example(x, SP) == ([1, 11, 12, 13, 2], [IGNORE_INDEX, 11, 12, 13, 2])
    assert causal_example(x, SP, "r2l") == ([1, 13, 12, 11, 2], [IGNORE_INDEX, 13, 12, 11, 2])
    g = torch.Generator().manual_seed(0)
    for direction in ("l2r", "r2l"):
        seq, labels, decisions = infill_example(list(range(20, 40)), SP, 0.4, g, direction)
        ctx_len = seq.index(SP.sep) + 1
        ctx = seq[:ctx_len]
        assert ctx[0] == SP.bos and SP.mask in ctx  # 20 tokens at 0.4: a mask is all but certain
        body = list(range(20, 40))[::-1] if direction == "r2l" else list(range(20, 40))
        assert seq[ctx_len:] == [*body, SP.eos]  # the *full* sentence is generated (footnote 2)
        assert labels[:ctx_len] == [IGNORE_INDEX] * ctx_len  # no loss on the masked context
        assert labels[ctx_len:] == [*body, SP.eos]
        kept = [t for t in ctx[1:-1] if t != SP.mask]
        assert kept == [t for t, d in zip(range(20, 40), decisions) if not d]  # context in reading order


# ---------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from textebm.data.layout import write_dataset

    words = "the a cat dog sat ran on under mat log big small red blue and then".split()
    g = torch.Generator().manual_seed(0)

    def sentence():
        n = int(torch.randint(4, 10, (1,), generator=g))
        return " ".join(words[int(i)] for i in torch.randint(0, len(words), (n,), generator=g))

    d = tmp_path_factory.mktemp("lm") / "data"
    write_dataset(d, {s: [{"text": sentence()} for _ in range(n)] for s, n in
                      (("train", 120), ("dev", 20), ("test", 20))}, {"name": "toy"})
    return d


TINY = ["--layers", "1", "--width", "32", "--heads", "2", "--context", "64", "--vocab-size", "300",
        "--batch-size", "16", "--no-progress", "--precision", "fp32"]


@pytest.mark.parametrize("objective,direction", [("causal", "l2r"), ("causal", "r2l"), ("infill", "l2r")])
def test_lm_train_writes_a_loadable_model_and_learns(data, tmp_path, objective, direction):
    from textebm.models.load import load_lm

    run = tmp_path / "run"
    assert main(["lm", "train", "--data", str(data), "--out", str(run), "--objective", objective,
                 "--direction", direction, "--epochs", "6", "--lr", "3e-3", *TINY]) == 0
    m = json.loads((run / "metrics.json").read_text())
    hist = m["train"]["history"]
    assert m["completed"] and hist[-1]["loss"] < hist[0]["loss"] - 0.5
    # 16 word types: a model that learned anything is far better than uniform over 300 tokens.
    assert 1 < m["eval"]["dev_perplexity"] < 60
    meta = json.loads((run / "model" / "textebm_lm.json").read_text())
    assert (meta["objective"], meta["direction"]) == (objective, direction)
    assert meta["mask_ratio"] == (0.4 if objective == "infill" else None)
    model, tok, lmeta = load_lm(run / "model")
    assert (lmeta.mask_token is not None) == (objective == "infill")
    assert json.loads((run / "config.json").read_text())["objective"] == objective


def test_lm_train_bad_settings_exit_2(data, tmp_path, capsys):
    assert main(["lm", "train", "--data", str(data), "--out", str(tmp_path / "r"), "--objective", "infill",
                 "--mask-ratio", "1.5", *TINY]) == 2
    assert "--mask-ratio" in capsys.readouterr().err
    assert main(["lm", "train", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "r2"), *TINY]) == 2
    assert "nope" in capsys.readouterr().err


def test_infill_lm_resumed_after_a_kill_equals_an_uninterrupted_run(data, tmp_path):
    """Infill masks are a function of (seed, epoch, example), not of the global RNG (the loader
    collates one batch ahead, so a checkpoint taken between steps has already drawn the next
    batch's): a run killed in the middle of an epoch and resumed sees the same masks and ends with
    bitwise the same weights. 120 texts in batches of 16: 8 steps an epoch, the checkpoint at 6."""
    args = ["lm", "train", "--data", str(data), "--objective", "infill",
            "--epochs", "2", "--checkpoint-every", "3", *TINY]
    env = {"OMP_NUM_THREADS": "1"}
    full = run_main("textebm.cli", [*args, "--out", str(tmp_path / "full")], env)
    assert full.returncode == 0, full.stderr
    cut = run_main("kill_at_step", ["7", *args, "--out", str(tmp_path / "cut")], env, entry="run")
    assert cut.returncode == 137 and not (tmp_path / "cut" / "model").exists()
    assert json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())["batch_in_epoch"] == 6
    resumed = run_main("textebm.cli", [*args, "--out", str(tmp_path / "cut"), "--resume"], env)
    assert resumed.returncode == 0, resumed.stderr
    a = load_file(str(tmp_path / "full" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_sigterm_stops_a_run_as_ctrl_c_does_and_resume_continues_it(data, tmp_path):
    """SIGTERM (`kill`, a scheduler's time limit) at step 7, the checkpoint of step 6 written: exit
    143 with the message Ctrl-C gets (the kept checkpoint, --resume), no model/ half-written; the
    resumed run finishes. In-process, the handler is Python's own again after `main` returns."""
    args = ["lm", "train", "--data", str(data), "--epochs", "2", "--checkpoint-every", "3", *TINY,
            "--out", str(tmp_path / "cut")]
    env = {"OMP_NUM_THREADS": "1"}
    cut = run_main("kill_at_step", ["7", "--sigterm", *args], env, entry="run")
    assert cut.returncode == 143, cut.stderr
    assert "terminated (SIGTERM)" in cut.stderr and "checkpoint of step 6" in cut.stderr
    assert "--resume" in cut.stderr and "Traceback" not in cut.stderr
    assert not (tmp_path / "cut" / "model").exists()
    resumed = run_main("textebm.cli", [*args, "--resume"], env)
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "cut" / "model" / "model.safetensors").is_file()
    before = signal.getsignal(signal.SIGTERM)
    assert main(["lm", "train", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "r"), *TINY]) == 2
    assert signal.getsignal(signal.SIGTERM) is before


def test_infill_masks_depend_on_seed_epoch_and_example_not_on_the_batch():
    from textebm.lm.train import LMBatcher

    b = LMBatcher(SP, "infill", "l2r", 0.4, seed=3)
    a, c = (0, list(range(20, 40))), (1, list(range(40, 60)))

    def row(batch, i):  # example i of a batch, without its padding
        keep = batch["attention_mask"][i].bool()
        return batch["input_ids"][i][keep].tolist(), batch["labels"][i][keep].tolist()

    alone, together = b([a]), b([c, a])
    assert row(alone, 0) == row(together, 1)  # the same mask whatever the batch around it
    assert row(b([c]), 0) == row(together, 0)
    b.set_epoch(1)
    assert row(b([a]), 0) != row(alone, 0)  # a new epoch masks afresh
    assert row(LMBatcher(SP, "infill", "l2r", 0.4, seed=4)([a]), 0) != row(alone, 0)
    with pytest.raises(ValueError, match="need"):
        b([list(range(20, 40))])  # plain ids only with an explicit generator (evaluation)
    g = torch.Generator().manual_seed(0)
    assert b([list(range(20, 40))], generator=g)["input_ids"].shape[0] == 1


def test_ctrl_c_says_that_resume_continues_the_run(data, tmp_path, capsys, monkeypatch):
    """Ctrl-C at step 3 (the checkpoint of step 2 written): exit 130, and the message names the
    kept checkpoint and --resume, which then finishes the run."""
    import textebm.train

    logged, inner = [], textebm.train.group_lrs

    def interrupt_at_step_3(optimizer):  # the loop logs every step (--log-every 1)
        logged.append(1)
        if len(logged) == 3:
            raise KeyboardInterrupt
        return inner(optimizer)

    monkeypatch.setattr(textebm.train, "group_lrs", interrupt_at_step_3)
    args = ["lm", "train", "--data", str(data), "--out", str(tmp_path / "r"), "--max-steps", "5",
            "--log-every", "1", "--checkpoint-every", "2", "--eval-split", "", *TINY]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "checkpoint of step 2 is kept" in err and "--resume" in err
    assert main([*args, "--resume"]) == 0
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["train"]["steps"] == 5


@pytest.mark.parametrize("objective", ["causal", "infill"])
def test_lm_loss_runs_the_head_on_labelled_rows_only_and_equals_the_full_logits_path(tmp_path, monkeypatch,
                                                                                       objective):
    """The fast path (the output layer on the labelled positions only) gives the loss, the token
    count and every gradient of the plain path (full logits, cross-entropy with ignore_index), in
    fp32 to rounding, with padding and infill's unlabelled positions in the batch."""
    from textebm.lm import scoring
    from textebm.lm.train import LMBatcher, lm_loss
    from textebm.models.lm import special_ids
    from textebm.models.load import load_lm
    from test_lm_sampling import make_tiny_lm, sentence

    model, tok, meta = load_lm(make_tiny_lm(tmp_path / "lm", objective=objective, seed=3))
    model.train()
    batcher = LMBatcher(special_ids(tok, meta), objective, "l2r", 0.4, seed=1)
    batch = batcher([(i, tok(sentence(i, n), add_special_tokens=False)["input_ids"])
                     for i, n in enumerate([9, 3, 6, 2])])
    assert (batch["attention_mask"] == 0).any() and (batch["labels"][:, 1:] == -100).any()

    def run():
        model.zero_grad()
        nll, n = lm_loss(model, batch)
        nll.backward()
        return nll.detach(), int(n), {k: p.grad.clone() for k, p in model.named_parameters()}

    calls = []
    head = model.lm_head.forward
    monkeypatch.setattr(model.lm_head, "forward", lambda x: calls.append(x.shape[0]) or head(x))
    fast = run()
    labelled = int((batch["labels"][:, 1:] != -100).sum())
    assert calls == [labelled] and labelled < batch["input_ids"].numel()  # the head saw the labelled rows only
    monkeypatch.setattr(scoring, "HEAD_SPLIT_TYPES", ())
    slow = run()
    assert fast[1] == slow[1] == labelled
    torch.testing.assert_close(fast[0], slow[0], rtol=1e-6, atol=1e-5)
    for k in slow[2]:
        torch.testing.assert_close(fast[2][k], slow[2][k], rtol=1e-5, atol=1e-6, msg=k)


def test_ctrl_c_after_the_last_step_says_resume_finishes_it(data, tmp_path, capsys, monkeypatch):
    """Ctrl-C while the evaluation runs (model/ written, no checkpoint): not "nothing was kept"."""
    import textebm.lm.train

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(textebm.lm.train.LMRecipe, "evaluate", interrupt)
    args = ["lm", "train", "--data", str(data), "--out", str(tmp_path / "r"), "--max-steps", "2",
            "--checkpoint-every", "100", *TINY]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "model/ is kept" in err and "--resume" in err and "nothing was kept" not in err
    assert (tmp_path / "r" / "model").is_dir()
    monkeypatch.undo()
    assert main([*args, "--resume"]) == 0
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["completed"]


def test_overwrite_refuses_a_run_the_user_edited_and_replaces_one_lm_eval_updated(data, tmp_path, capsys):
    run = tmp_path / "r"
    args = ["lm", "train", "--data", str(data), "--out", str(run), "--max-steps", "2", "--eval-split", "", *TINY]
    assert main(args) == 0
    assert "Writing model shards" not in capsys.readouterr().err  # --no-progress: no bar at all
    assert main(["lm", "eval", "--model", str(run), "--data", str(data), "--split", "dev", "--precision", "fp32"]) == 0
    assert main([*args, "--overwrite"]) == 0  # lm eval's own change is sealed: still textebm's run
    metrics = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**metrics, "my_note": "keep"}))
    capsys.readouterr()
    assert main([*args, "--overwrite"]) == 2
    assert "metrics.json changed since `lm train` wrote it" in capsys.readouterr().err
    assert json.loads((run / "metrics.json").read_text())["my_note"] == "keep"


def test_a_saved_model_has_ordinary_file_modes(data, tmp_path):
    import os

    old = os.umask(0o022)
    try:
        assert main(["lm", "train", "--data", str(data), "--out", str(tmp_path / "r"), "--max-steps", "1",
                     "--eval-split", "", *TINY]) == 0
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "r" / "model").iterdir()}
    assert set(modes.values()) == {0o644}, modes


def test_keep_best_ends_at_the_dev_optimum_and_stops_with_patience(data, tmp_path, capsys):
    """--keep-best --patience: the dev NLL after every epoch; a small LM at a high rate overfits 120
    sentences of random words, so the run stops `patience` epochs after its best and ends with that
    epoch's weights, whose dev NLL the final evaluation reproduces."""
    run = tmp_path / "best"
    assert main(["lm", "train", "--data", str(data), "--out", str(run), "--epochs", "40", "--lr", "1e-2",
                 "--keep-best", "--patience", "2", *TINY]) == 0
    m = json.loads((run / "metrics.json").read_text())
    val, kept = m["train"]["validation"], m["train"]["kept"]
    assert kept == min(val, key=lambda v: v["loss"]) and m["train"]["stopped_early"]
    assert len(val) < 40 and val.index(kept) == len(val) - 3  # stopped 2 validations after the best
    assert m["eval"]["dev_nll_per_token"] == pytest.approx(kept["loss"], abs=1e-9)
    capsys.readouterr()
    assert main(["lm", "train", "--data", str(data), "--out", str(tmp_path / "p"), "--patience", "2", *TINY]) == 2
    assert "--patience" in capsys.readouterr().err and not (tmp_path / "p").exists()
    assert main(["lm", "train", "--data", str(data), "--out", str(tmp_path / "e"), "--keep-best", "--eval-split", "",
                 *TINY]) == 2
    assert "--keep-best" in capsys.readouterr().err and not (tmp_path / "e").exists()


def test_lm_eval_chunk_scores_running_text_as_lm_train_evaluates_it(tmp_path, capsys):
    """`lm eval --chunk N` joins each document's texts and cuts them into pieces of N tokens: on the
    dev split it gives the per-token NLL that `lm train --chunk N` measured there (another
    batching, the same sums). Without --chunk a text longer than the model takes is refused, the
    message naming --chunk; a --chunk the model cannot take is refused too."""
    from conftest import toy_corpus, walking_doc

    toy_corpus(tmp_path, walking_doc)
    run = tmp_path / "lm"
    assert main(["lm", "train", "--data", str(tmp_path / "data"), "--tokenizer", str(tmp_path / "vocab"),
                 "--layers", "1", "--width", "32", "--heads", "2", "--context", "20", "--chunk", "18",
                 "--max-steps", "6", "--batch-size", "8", "--out", str(run), "--no-progress",
                 "--precision", "fp32"]) == 0  # [bos] + 18 + [eos]: the 20 positions, the most a piece takes
    trained = json.loads((run / "metrics.json").read_text())["eval"]
    out = tmp_path / "eval.json"
    assert main(["lm", "eval", "--model", str(run), "--data", str(tmp_path / "data"), "--split", "dev",
                 "--chunk", "18", "--batch-size", "5", "--precision", "fp32", "--metrics", str(out)]) == 0
    got = json.loads(out.read_text())["eval_dev"]
    assert got["tokens"] == trained["dev_tokens"] and got["chunk"] == 18
    assert got["nll_per_token"] == pytest.approx(trained["dev_nll_per_token"], abs=1e-6)
    capsys.readouterr()
    assert main(["lm", "eval", "--model", str(run), "--data", str(tmp_path / "data"), "--split", "dev",
                 "--precision", "fp32"]) == 2  # sentences of up to 12 words: some pass 18 tokens
    assert "--chunk 18" in capsys.readouterr().err
    assert main(["lm", "eval", "--model", str(run), "--data", str(tmp_path / "data"), "--split", "dev",
                 "--chunk", "19", "--precision", "fp32"]) == 2
    assert "--chunk 19" in capsys.readouterr().err
    assert main(["lm", "train", "--data", str(tmp_path / "data"), "--tokenizer", str(tmp_path / "vocab"),
                 "--layers", "1", "--width", "32", "--heads", "2", "--context", "20", "--chunk", "19",
                 "--max-steps", "1", "--out", str(tmp_path / "lm19"), "--no-progress"]) == 2
    assert "--chunk 18 at most" in capsys.readouterr().err and not (tmp_path / "lm19").exists()
