"""The generic training loop: resume-after-kill equals an uninterrupted run (also with extra data
streams and parameter groups), NaN stops the run, checkpoints are safetensors + JSON, config
mismatch on resume is refused; streams stay aligned when sharded, cycling streams run through
their own epochs, a parameter group at lr 0 does not move."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

import toy_train as toy
from forked import run_main
from textebm.checkpoint import optimizer_from_files, optimizer_to_files
from textebm.data.batching import BucketBatchSampler, CycleBatchSampler, Stream, stream_sampler
from textebm.errors import TextebmError
from textebm.train import (
    cosine_schedule,
    linear_schedule,
    make_optimizer,
    ParamGroup,
    TrainOptions,
)

HERE = Path(__file__).parent


def run_toy(out, *args):
    """toy_train.py OUT ARGS as a process of its own (forked from a server that imported torch once)."""
    return run_main("toy_train", [str(out), *map(str, args)])


def weights(run):
    return load_file(str(Path(run) / "model" / "model.safetensors"))


def test_resume_after_kill_equals_uninterrupted(tmp_path):
    full = run_toy(tmp_path / "full")
    assert full.returncode == 0, full.stderr
    killed = run_toy(tmp_path / "cut", "--kill-at", "17")
    assert killed.returncode == 137
    state = json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())
    assert state["step"] == 15  # last checkpoint before the kill (every 5 steps)
    assert not (tmp_path / "cut" / "model").exists()
    # the run folder moved (renamed) before it resumes: a run is its folder's content, not its old --out
    (tmp_path / "cut").rename(tmp_path / "moved")
    resumed = run_toy(tmp_path / "moved", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a, b = weights(tmp_path / "full"), weights(tmp_path / "moved")
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]).all(), k  # bitwise equal on CPU
    ma = json.loads((tmp_path / "full" / "metrics.json").read_text())
    mb = json.loads((tmp_path / "moved" / "metrics.json").read_text())
    assert ma["eval"] == mb["eval"]
    assert [h["loss"] for h in ma["train"]["history"]] == [h["loss"] for h in mb["train"]["history"]]
    assert not (tmp_path / "moved" / "checkpoint").exists()  # removed after success


def test_same_seed_same_numbers(tmp_path):
    assert run_toy(tmp_path / "a").returncode == 0
    assert run_toy(tmp_path / "b").returncode == 0
    a, b = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert all((a[k] == b[k]).all() for k in a)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    res = run_toy(tmp_path / "r", "--nan-at", "12")
    assert res.returncode == 2
    assert "loss is nan at step 12" in res.stderr
    assert "last good checkpoint" in res.stderr
    state = json.loads((tmp_path / "r" / "checkpoint" / "state.json").read_text())
    assert state["step"] == 10
    ckpt = load_file(str(tmp_path / "r" / "checkpoint" / "model.safetensors"))
    assert all(v.isfinite().all() for v in ckpt.values())
    assert not (tmp_path / "r" / "model").exists()


def test_a_failed_start_leaves_nothing_and_a_later_failure_leaves_a_resumable_run(tmp_path):
    early = run_toy(tmp_path / "early", "--nan-at", "3")  # before the first checkpoint (step 5)
    assert early.returncode == 2 and "no checkpoint was written yet" in early.stderr
    assert not (tmp_path / "early").exists()  # so the same command simply runs again
    assert run_toy(tmp_path / "early").returncode == 0
    late = run_toy(tmp_path / "late", "--nan-at", "12")
    assert late.returncode == 2 and (tmp_path / "late" / "checkpoint" / "state.json").is_file()
    again = run_toy(tmp_path / "late")  # neither refused as "settings differ" nor silently reused
    assert again.returncode == 2 and "--resume" in again.stderr and "--overwrite" in again.stderr
    assert run_toy(tmp_path / "late", "--overwrite").returncode == 0
    assert weights(tmp_path / "late").keys() == weights(tmp_path / "early").keys()


def test_existing_run_refused_and_resume_with_other_settings_refused(tmp_path):
    assert run_toy(tmp_path / "r", "--epochs", "1").returncode == 0
    again = run_toy(tmp_path / "r", "--epochs", "1")
    assert again.returncode == 2 and "--overwrite" in again.stderr and "Traceback" not in again.stderr
    other = run_toy(tmp_path / "r", "--resume", "--epochs", "2")
    assert other.returncode == 2 and "epochs" in other.stderr


def test_bf16_autocast_trains(tmp_path):
    res = run_toy(tmp_path / "r", "--precision", "bf16")
    assert res.returncode == 0, res.stderr
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["train"]["precision"] == "bf16"
    h = m["train"]["history"]
    assert h[-1]["loss"] < h[0]["loss"]


def test_bucket_sampler_is_a_seeded_permutation_of_similar_lengths():
    lengths = [(i * 37) % 101 for i in range(1000)]
    s = BucketBatchSampler(lengths, 16, seed=5)
    s.set_epoch(2)
    batches = list(s)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(1000))
    s2 = BucketBatchSampler(lengths, 16, seed=5)
    s2.set_epoch(2)
    assert list(s2) == batches
    s2.set_epoch(3)
    assert list(s2) != batches
    # within a batch, lengths are close (sorted windows): mean spread far below the random spread
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread < 10


def test_linear_schedule():
    f = linear_schedule(4, 20)
    assert [round(f(s), 3) for s in (0, 3, 4, 12, 20)] == [0.25, 1.0, 1.0, 0.5, 0.0]


def test_cosine_schedule():
    """Warm-up as the linear one, then 0.5 (1 + cos(pi d)) with d the decay's fraction done (16
    steps): 1 at its start, (1 + cos(pi/4)) / 2 = 0.8536 a quarter in, 0.5 halfway, 0 at the end."""
    f = cosine_schedule(4, 20)
    assert [round(f(s), 4) for s in (0, 3, 4, 8, 12, 16, 20)] == [0.25, 1.0, 1.0, 0.8536, 0.5, 0.1464, 0.0]
    assert f(25) == 0.0  # past the end it stays at 0, as the linear one does
    g = cosine_schedule(0, 10)  # no warm-up
    assert g(0) == 1.0 and g(5) == pytest.approx(0.5) and g(10) == 0.0


def test_cosine_run_follows_its_schedule_and_resumes_exactly(tmp_path):
    """--schedule cosine: the logged learning rate is lr x cosine_schedule at each step (36 steps,
    2 of warm-up), and a run killed at step 17 resumes to bitwise the uninterrupted weights."""
    assert run_toy(tmp_path / "full", "--schedule", "cosine").returncode == 0
    assert run_toy(tmp_path / "cut", "--schedule", "cosine", "--kill-at", "17").returncode == 137
    resumed = run_toy(tmp_path / "cut", "--schedule", "cosine", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a, b = weights(tmp_path / "full"), weights(tmp_path / "cut")
    assert all((a[k] == b[k]).all() for k in a)
    history = json.loads((tmp_path / "full" / "metrics.json").read_text())["train"]["history"]
    f = cosine_schedule(2, 36)
    assert [h["lr"] for h in history] == pytest.approx([1e-2 * f(h["step"]) for h in history], abs=1e-12)
    assert history[4]["step"] == 20 and history[4]["lr"] == pytest.approx(1e-2 * 0.5 * (1 + math.cos(math.pi * 18 / 34)))
    assert json.loads((tmp_path / "full" / "config.json").read_text())["schedule"] == "cosine"


def test_a_run_recorded_before_an_option_existed_resumes_as_its_default(tmp_path):
    """A config.json written before --schedule existed has no "schedule" key: --resume reads it as
    the default (linear, what that run trained with) and continues it bitwise; asking for another
    value than the default is still refused, naming the option."""
    assert run_toy(tmp_path / "full").returncode == 0
    assert run_toy(tmp_path / "cut", "--kill-at", "17").returncode == 137
    cfg_file = tmp_path / "cut" / "config.json"
    old = json.loads(cfg_file.read_text())
    del old["schedule"]
    cfg_file.write_text(json.dumps(old))
    other = run_toy(tmp_path / "cut", "--resume", "--schedule", "cosine")
    assert other.returncode == 2 and "schedule='linear'->'cosine'" in other.stderr, other.stderr
    resumed = run_toy(tmp_path / "cut", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a, b = weights(tmp_path / "full"), weights(tmp_path / "cut")
    assert all((a[k] == b[k]).all() for k in a)


def test_optimizer_state_roundtrip_through_files():
    import torch

    p = torch.nn.Parameter(torch.randn(3, 2))
    opt = torch.optim.AdamW([p], lr=0.1)
    p.grad = torch.ones_like(p)
    opt.step()
    tensors, meta = optimizer_to_files(opt)
    json.dumps(meta)  # JSON-serialisable
    sd = optimizer_from_files(tensors, meta)
    opt2 = torch.optim.AdamW([torch.nn.Parameter(p.detach().clone())], lr=0.1)
    opt2.load_state_dict(sd)
    for k, v in opt.state_dict()["state"][0].items():
        assert torch.equal(torch.as_tensor(v), torch.as_tensor(opt2.state_dict()["state"][0][k]))


@pytest.mark.parametrize("n", [96, 100, 1001])
@pytest.mark.parametrize("processes", [2, 3])
def test_sharded_bucket_batches_cover_every_example(n, processes):
    """accelerate deals the batches to processes in rounds and drops a round whose last batch is
    short; the sampler puts its one short batch last, so no example is lost."""
    from accelerate.data_loader import BatchSamplerShard

    s = BucketBatchSampler([(i * 7) % 41 for i in range(n)], 16, seed=3)
    batches = list(s)
    assert all(len(b) == 16 for b in batches[:-1])  # only the last may be short
    seen = set()
    for p in range(processes):
        shard = list(BatchSamplerShard(s, processes, p, split_batches=False, even_batches=True))
        assert len(shard) == -(-len(batches) // processes)
        seen |= {i for b in shard for i in b}
    assert seen == set(range(n))


def same_weights(a_run, b_run):
    a, b = weights(a_run), weights(b_run)
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]).all(), k  # bitwise equal on CPU


def history(run):
    return json.loads((Path(run) / "metrics.json").read_text())["train"]["history"]


def batch_log(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


# ---------------------------------------------------------------- data streams


@pytest.mark.parametrize("n", [96, 100])
@pytest.mark.parametrize("processes", [1, 2, 3])
def test_lockstep_stream_covers_its_epoch_items_and_stays_aligned_when_sharded(n, processes):
    """K items per main item at batch size K x B: as many batches as the main stream, its short
    batch last; under accelerate's round-robin sharding every process gets main batch r and
    stream batch r together, and both streams give each process equally many batches."""
    from accelerate.data_loader import BatchSamplerShard

    k, B = 3, 8
    opts = TrainOptions(out="unused", batch_size=B, seed=4)
    lengths = [(i * 7) % 41 + 1 for i in range(n)]
    pool_lengths = [(i * 13) % 57 + 1 for i in range(n * 4)]  # 4 samples per main item

    def items(e):  # samples (e*K + j) mod 4 of every item
        return [4 * i + (e * k + j) % 4 for i in range(n) for j in range(k)]

    main = BucketBatchSampler(lengths, B, opts.seed)
    aux = stream_sampler(Stream(dataset=pool_lengths, lengths=pool_lengths, collate=list, batch_size=k * B,
                                epoch_items=items), opts.seed, len(main))
    for e in (0, 1):
        main.set_epoch(e)
        aux.set_epoch(e)
        mb, ab = list(main), list(aux)
        assert len(mb) == len(ab) == -(-n // B)
        assert sorted(i for b in ab for i in b) == sorted(items(e))  # each epoch item exactly once
        assert all(len(b) == k * B for b in ab[:-1]) and len(ab[-1]) == k * len(mb[-1])
        where_m = {tuple(b): r for r, b in enumerate(mb)}
        where_a = {tuple(b): r for r, b in enumerate(ab)}
        for p in range(processes):
            ms = list(BatchSamplerShard(main, processes, p))
            as_ = list(BatchSamplerShard(aux, processes, p))
            assert len(ms) == len(as_) == len(BatchSamplerShard(main, processes, p))
            # the round each batch came from (None: a batch accelerate completed from the first ones)
            assert [where_m.get(tuple(b)) for b in ms] == [where_a.get(tuple(b)) for b in as_]
    assert items(0) != items(1)  # the noise pool's pattern: other samples of each item every epoch
    aux.set_epoch(2)
    assert list(aux) != ab


def test_lockstep_stream_of_another_size_is_refused(tmp_path):
    from textebm.train import train

    items = toy.data(16)
    recipe = toy.ToyRecipe(toy.argparse.Namespace(streams=False, group=[], buffer=False), toy.Toy(), items)
    recipe.streams = {"other": Stream(dataset=items, lengths=[len(i) for i, _ in items], collate=toy.collate,
                                      batch_size=4)}
    with pytest.raises(TextebmError, match="lockstep stream needs as many"):
        train(toy.options(str(tmp_path / "r"), precision="fp32"), {}, recipe)
    assert not (tmp_path / "r").exists()  # a failed start leaves nothing


def test_cycling_stream_runs_through_its_own_epochs():
    """51 items at batch size 8: 6 full batches an epoch (the short one dropped); with 12 main
    batches an epoch, main epoch e reads its batches 12e .. 12e+11 of the stream's own epochs."""
    unl = toy.streams()["unl"]
    s = stream_sampler(unl, toy.options("unused").seed, 12)
    assert isinstance(s, CycleBatchSampler) and len(s) == 12
    seq = []
    for e in range(3):
        s.set_epoch(e)
        seq += list(s)
    assert len(seq) == 36 and all(len(b) == 8 for b in seq)
    own_epochs = [sorted(i for b in seq[j:j + 6] for i in b) for j in range(0, 36, 6)]
    assert all(len(set(ep)) == 48 and set(ep) <= set(range(51)) for ep in own_epochs)  # each once, 3 dropped
    assert len({tuple(ep) for ep in own_epochs}) > 1  # another permutation each epoch
    inner = BucketBatchSampler(unl.lengths, 8, toy.options("unused").seed + unl.seed_offset)
    assert seq[12:18] == inner.batches(2)[:6]  # main epoch 1 starts the stream's epoch 2
    s.set_epoch(1)
    assert list(s) == seq[12:24]  # a resumed epoch draws the same batches


def test_streams_train_and_resume_after_kill_equals_uninterrupted(tmp_path):
    """The toy with a lockstep and a cycling stream: every step gets the batches the samplers
    give, the loss falls, and a run killed mid-epoch (the cycling stream mid-way through its own
    epoch) resumes to bitwise the same weights, drawing the same batches of every stream."""
    full = run_toy(tmp_path / "full", "--streams", "--batch-log", tmp_path / "full.log")
    assert full.returncode == 0, full.stderr
    logged = batch_log(tmp_path / "full.log.0")
    assert logged == toy.expected_batches(3)
    h = history(tmp_path / "full")
    assert h[-1]["loss"] < 0.3 * h[0]["loss"]

    killed = run_toy(tmp_path / "cut", "--streams", "--batch-log", tmp_path / "cut.log", "--kill-at", "17")
    assert killed.returncode == 137
    assert json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())["step"] == 15
    resumed = run_toy(tmp_path / "cut", "--streams", "--batch-log", tmp_path / "cut.log", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    same_weights(tmp_path / "full", tmp_path / "cut")
    assert history(tmp_path / "full") == history(tmp_path / "cut")
    cut = batch_log(tmp_path / "cut.log.0")
    assert len(cut) == 17 + 21 and cut[:15] + cut[17:] == logged  # steps 16, 17 drawn again alike


# ---------------------------------------------------------------- parameter groups


def test_make_optimizer_groups_keep_decay_off_biases_and_refuse_bad_groups():
    model = toy.Toy()
    opts = TrainOptions(out="unused", lr=0.01, weight_decay=0.1)
    opt = make_optimizer(model, opts, [ParamGroup(name="head", prefix="out.", lr=0.002)])
    got = [(g["name"], g["lr"], g["weight_decay"], [p.shape for p in g["params"]]) for g in opt.param_groups]
    assert got == [("", 0.01, 0.1, [(50, 16)]), ("", 0.01, 0.0, []),
                   ("head", 0.002, 0.1, [(1, 16)]), ("head", 0.002, 0.0, [(1,)])]
    assert opt.defaults["fused"]
    plain = make_optimizer(model, opts)  # no groups: every parameter at --lr, as before
    assert [len(g["params"]) for g in plain.param_groups] == [2, 1]
    with pytest.raises(TextebmError, match="match no"):
        make_optimizer(model, opts, [ParamGroup(name="x", prefix="nope.", lr=1.0)])
    with pytest.raises(TextebmError, match="several"):
        make_optimizer(model, opts, [ParamGroup(name="a", prefix="out", lr=1.0),
                                     ParamGroup(name="b", prefix="out.w", lr=1.0)])


def test_param_group_at_lr_0_stays_put_and_resume_is_exact(tmp_path):
    """emb at twice the learning rate, out at 0: out keeps its initial weights, emb learns, the
    loss falls, the schedule scales both groups alike, and a killed run resumes exactly."""
    import torch

    args = ("--group", "emb.=0.02", "--group", "out.=0")
    full = run_toy(tmp_path / "full", *args)
    assert full.returncode == 0, full.stderr
    torch.manual_seed(0)  # as toy_train.main does before building the model
    init = toy.Toy().state_dict()
    w = weights(tmp_path / "full")
    assert torch.equal(w["out.weight"], init["out.weight"]) and torch.equal(w["out.bias"], init["out.bias"])
    assert (w["emb.weight"] - init["emb.weight"]).abs().max() > 1e-3
    h = history(tmp_path / "full")
    assert h[-1]["loss"] < 0.5 * h[0]["loss"]
    assert all(x["lr_out"] == 0 and x["lr_emb"] == pytest.approx(2 * x["lr"]) for x in h)
    assert h[0]["lr"] > h[-2]["lr"] > h[-1]["lr"] == 0  # decays to 0

    killed = run_toy(tmp_path / "cut", *args, "--kill-at", "12")
    assert killed.returncode == 137
    resumed = run_toy(tmp_path / "cut", *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    same_weights(tmp_path / "full", tmp_path / "cut")
    assert history(tmp_path / "full") == history(tmp_path / "cut")


def test_progress_line_from_a_history_entry():
    from textebm.train import progress_line

    entry = {"step": 40, "loss": 3.21449}
    assert progress_line(entry, 320, 20, 42.0) == "step 40/320 (12%), loss 3.2145, 2.10 s/step, about 9.8 min left"
    assert progress_line({**entry, "step": 320}, 320, 20, 42.0) == "step 320/320 (100%), loss 3.2145, 2.10 s/step"
    assert progress_line(entry, 320, 0, 0.0) == "step 40/320 (12%), loss 3.2145"  # nothing measured yet


def test_without_a_bar_the_loop_logs_a_line_per_logged_window(tmp_path, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="textebm.train"):
        toy.main([str(tmp_path / "run")])  # progress=False, log_every=4
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    history = json.loads((tmp_path / "run" / "metrics.json").read_text())["train"]["history"]
    assert len(lines) == len(history) >= 3
    assert [line.split(",")[0] for line in lines] == [f"step {h['step']}/{history[-1]['step']} "
                                                      f"({100 * h['step'] / history[-1]['step']:.0f}%)" for h in history]


def test_overwrite_that_fails_before_its_first_checkpoint_keeps_the_earlier_run(tmp_path):
    """--overwrite replaces the earlier run only once the new one has a checkpoint: a NaN at step 2
    brings the earlier run back whole; a NaN after the first checkpoint leaves the new run, resumable."""
    run = tmp_path / "r"
    assert run_toy(run, "--epochs", "1").returncode == 0
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    early = run_toy(run, "--epochs", "1", "--overwrite", "--nan-at", "2")
    assert early.returncode == 2 and "no checkpoint was written yet" in early.stderr
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before  # model, metrics.json, config.json and the marker, byte for byte
    late = run_toy(run, "--epochs", "1", "--overwrite", "--nan-at", "7")  # checkpoint at 5
    assert late.returncode == 2 and "last good checkpoint" in late.stderr
    assert not (run / "model").exists() and (run / "checkpoint" / "state.json").is_file()
    assert sorted(p.name for p in run.iterdir()) == [".textebm-output.json", "checkpoint", "config.json"]


def test_a_killed_overwrite_keeps_the_earlier_run_aside_until_the_next_try_holds(tmp_path):
    """A hard kill before the first checkpoint leaves the earlier run set aside; the next
    --overwrite drops the killed try, and the earlier run goes only when a try gets a checkpoint."""
    import torch

    run = tmp_path / "r"
    assert run_toy(run, "--epochs", "1").returncode == 0
    old_model = weights(run)
    assert run_toy(run, "--epochs", "1", "--overwrite", "--kill-at", "3").returncode == 137
    aside = run / ".textebm-replaced"
    assert (aside / "model" / "model.safetensors").is_file() and not (run / "model").exists()
    assert run_toy(run, "--epochs", "1", "--overwrite", "--nan-at", "2").returncode == 2
    assert not aside.exists() and all(torch.equal(weights(run)[k], old_model[k]) for k in old_model)
    assert json.loads((run / "metrics.json").read_text())["completed"]  # the earlier run, back whole
    assert run_toy(run, "--epochs", "1", "--overwrite", "--kill-at", "3").returncode == 137
    assert run_toy(run, "--epochs", "1", "--overwrite").returncode == 0
    assert not aside.exists() and (run / "metrics.json").is_file()


def test_recipe_state_is_checkpointed_and_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    """A recipe's own state (here a buffer of the last predictions that enters the loss, as a
    replay buffer does) is saved with the checkpoint as safetensors and restored on resume."""
    full = run_toy(tmp_path / "full", "--buffer")
    assert full.returncode == 0, full.stderr
    killed = run_toy(tmp_path / "cut", "--buffer", "--kill-at", "17")
    assert killed.returncode == 137
    saved = load_file(str(tmp_path / "cut" / "checkpoint" / "recipe-0.safetensors"))
    assert saved["buffer"].shape == (4,) and saved["buffer"].abs().sum() > 0
    assert run_toy(tmp_path / "cut", "--buffer", "--resume").returncode == 0
    same_weights(tmp_path / "full", tmp_path / "cut")
    assert history(tmp_path / "full") == history(tmp_path / "cut")
    a = load_file(str(tmp_path / "full" / "model" / "buffer.safetensors"))["buffer"]
    b = load_file(str(tmp_path / "cut" / "model" / "buffer.safetensors"))["buffer"]
    assert (a == b).all()
    no_buffer = run_toy(tmp_path / "plain")
    assert no_buffer.returncode == 0
    assert history(tmp_path / "plain") != history(tmp_path / "full")  # the buffer does enter the loss


def test_an_interrupted_run_says_that_resume_continues_it(tmp_path):
    res = run_toy(tmp_path / "r", "--interrupt-at", "7")
    assert res.returncode == 130
    assert "checkpoint of step 5 is kept" in res.stderr and "--resume" in res.stderr
    assert run_toy(tmp_path / "r", "--resume").returncode == 0
    early = run_toy(tmp_path / "e", "--interrupt-at", "2")
    assert early.returncode == 130 and "before its first checkpoint" in early.stderr
    assert not (tmp_path / "e").exists()
    # --overwrite of a finished run, stopped before its first checkpoint: the earlier run is put back,
    # and the message says so (not that a --resume would continue it)
    before = weights(tmp_path / "r")
    again = run_toy(tmp_path / "r", "--overwrite", "--interrupt-at", "2")
    assert again.returncode == 130 and "the earlier run that --overwrite was to replace is back in place" in again.stderr
    assert "--resume" not in again.stderr
    after = weights(tmp_path / "r")
    assert all((before[k] == after[k]).all() for k in before)


def test_typed_batches_move_whole_as_accelerate_moves_batches():
    """accelerate's loaders call `.to(device)` on a batch: a Batch dataclass moves every tensor,
    those of its dict fields too, and keeps its other fields (the meta device stands for a GPU)."""
    import torch
    from accelerate.utils import send_to_device

    from textebm.classify.data import ClassifyBatch
    from textebm.detection.train import WindowBatch

    ids = torch.ones(2, 3, dtype=torch.long)
    b = send_to_device(ClassifyBatch(data={"input_ids": ids}, labels=torch.zeros(2), index=torch.arange(2),
                                     noise={"input_ids": ids}), torch.device("meta"))
    assert isinstance(b, ClassifyBatch)
    assert {t.device.type for t in (b.data["input_ids"], b.labels, b.index, b.noise["input_ids"])} == {"meta"}
    w = send_to_device(WindowBatch(input_ids=ids, attention_mask=ids, k=2), torch.device("meta"))
    assert w.k == 2 and w.input_ids.is_meta and w.attention_mask.is_meta
    assert ClassifyBatch(data={}, labels=ids, index=ids).to("meta").noise is None


def test_setting_an_earlier_run_aside_completes_after_a_crash(tmp_path, monkeypatch):
    """--overwrite moves the earlier run aside entry by entry; a crash in the middle leaves some
    entries moved. The next try completes the move (it never takes the earlier run's remaining
    entries for a failed try's and removes them), and a failed start brings the whole run back."""
    from pathlib import Path

    from textebm.outputs import MARKER, write_marker
    from textebm.runfolder import abandon_failed_start, SET_ASIDE, set_aside

    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.json", "metrics.json"):
        (run / name).write_text(name)
    (run / "model").mkdir()
    (run / "model" / "w.safetensors").write_text("weights")
    write_marker(run, "lm train", ["config.json", "metrics.json", "model"])
    (run / "notes.txt").write_text("mine")
    real, calls = Path.rename, {"n": 0}

    def crash_on_the_second(self, target):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # the process dies here
        return real(self, target)

    monkeypatch.setattr(Path, "rename", crash_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        set_aside(run)
    monkeypatch.setattr(Path, "rename", real)
    set_aside(run)  # the next --overwrite
    aside = run / SET_ASIDE
    assert sorted(p.name for p in aside.iterdir()) == sorted(["config.json", "metrics.json", "model", MARKER])
    assert (aside / "model" / "w.safetensors").read_text() == "weights"
    assert sorted(p.name for p in run.iterdir()) == sorted([SET_ASIDE, "notes.txt"])
    abandon_failed_start(run, created=False)  # the new run fails before its first checkpoint
    assert sorted(p.name for p in run.iterdir()) == sorted(["config.json", "metrics.json", "model", MARKER, "notes.txt"])


KEEP_BEST = "12:3,24:1,36:2"  # validation after epochs 1, 2 and the last step (12 steps an epoch)


def test_keep_best_ends_with_the_best_validations_weights_also_after_a_kill(tmp_path):
    full = run_toy(tmp_path / "full", "--keep-best", KEEP_BEST, "--weights-log", str(tmp_path / "w"))
    assert full.returncode == 0, full.stderr
    best = load_file(str(tmp_path / "w" / "step-24.safetensors"))
    last = load_file(str(tmp_path / "w" / "step-36.safetensors"))
    kept = weights(tmp_path / "full")
    assert all((kept[k] == best[k]).all() for k in best)
    assert any((kept[k] != last[k]).any() for k in last)  # the last step's weights were not kept
    m = json.loads((tmp_path / "full" / "metrics.json").read_text())
    assert [(v["step"], v["loss"]) for v in m["train"]["validation"]] == [(12, 3.0), (24, 1.0), (36, 2.0)]
    assert m["train"]["kept"]["step"] == 24
    assert not (tmp_path / "full" / "best").exists()  # removed with the checkpoint after success
    # the last step's weights are kept beside as RUN/last, a model folder like RUN/model
    kept_last = load_file(str(tmp_path / "full" / "last" / "model.safetensors"))
    assert all((kept_last[k] == last[k]).all() for k in last)
    # killed after the best epoch was stored, then resumed: the same weights are kept
    assert run_toy(tmp_path / "cut", "--keep-best", KEEP_BEST, "--kill-at", "27").returncode == 137
    assert json.loads((tmp_path / "cut" / "best" / "best.json").read_text())["step"] == 24
    resumed = run_toy(tmp_path / "cut", "--keep-best", KEEP_BEST, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    again = weights(tmp_path / "cut")
    assert all((again[k] == best[k]).all() for k in best)


def test_keep_best_keeps_the_last_weights_when_they_are_best(tmp_path):
    assert run_toy(tmp_path / "a", "--keep-best", "12:3,24:2,36:1").returncode == 0
    assert run_toy(tmp_path / "b").returncode == 0
    a, b = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert all((a[k] == b[k]).all() for k in a)  # validating changes no training number
    assert json.loads((tmp_path / "a" / "metrics.json").read_text())["train"]["kept"]["step"] == 36
    assert not (tmp_path / "a" / "last").exists()  # no copy when the last weights are the kept ones


def test_keep_best_needs_a_validation_loss(tmp_path):
    import torch

    from textebm.train import Recipe, train

    class NoValidation(Recipe):
        keep_best = True
        model, dataset, lengths, collate = torch.nn.Linear(1, 1), [1], [1], list

    with pytest.raises(TextebmError, match="no validation loss"):
        train(toy.options(str(tmp_path / "run")), {}, NoValidation())
    assert not (tmp_path / "run").exists()


def test_patience_stops_when_the_validation_loss_stops_improving(tmp_path):
    script = "12:3,24:1,36:2,48:0.5,60:0.1"  # 5 epochs; without patience the last is best
    assert run_toy(tmp_path / "p", "--epochs", "5", "--keep-best", script, "--patience", "1",
                   "--weights-log", str(tmp_path / "w")).returncode == 0
    m = json.loads((tmp_path / "p" / "metrics.json").read_text())["train"]
    assert [v["step"] for v in m["validation"]] == [12, 24, 36] and m["steps"] == 36 and m["stopped_early"]
    assert m["kept"]["step"] == 24
    best, kept = load_file(str(tmp_path / "w" / "step-24.safetensors")), weights(tmp_path / "p")
    assert all((kept[k] == best[k]).all() for k in best)
    assert run_toy(tmp_path / "all", "--epochs", "5", "--keep-best", script).returncode == 0
    m = json.loads((tmp_path / "all" / "metrics.json").read_text())["train"]
    assert m["steps"] == 60 and not m["stopped_early"] and m["kept"]["step"] == 60
    refused = run_toy(tmp_path / "x", "--patience", "1")
    assert refused.returncode == 2 and "needs keep_best" in refused.stderr and not (tmp_path / "x").exists()


def test_a_cycling_stream_smaller_than_a_batch_is_a_clear_error():
    from textebm.data.batching import BucketBatchSampler, CycleBatchSampler
    from textebm.errors import TextebmError

    with pytest.raises(TextebmError, match="a cycling stream needs at least batch_size"):
        CycleBatchSampler(BucketBatchSampler([1, 2], 4, 0), 3)


def test_an_inputs_content_is_what_a_training_reads_of_it(tmp_path):
    """input_hashes: a run folder stands for its model (RUN and RUN/model hash the same; what a run
    keeps beside it, an evaluation merged into metrics.json or a checkpoint, changes nothing); a
    dataset folder for its splits and description (an output written into it changes nothing); a
    file for its bytes; a name that is no path for itself."""
    from types import SimpleNamespace

    from textebm.train import input_hashes

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text("{}")
    (run / "metrics.json").write_text('{"completed": true}')
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"text": "a"}\n')
    (data / "dataset.json").write_text("{}")
    f = tmp_path / "t.jsonl"
    f.write_text('{"text": "b"}\n')
    h = lambda **kw: input_hashes(SimpleNamespace(**kw))  # noqa: E731
    first = h(init=str(run), data=str(data), train=[str(f)], encoder="minilm-l6")
    assert first["init"] == h(init=str(run / "model"))["init"] and first["encoder"] == "name:minilm-l6"
    (run / "metrics.json").write_text('{"completed": true, "eval": {"test_ppl": 9.0}}')
    (run / "checkpoint").mkdir()
    (data / "scores.jsonl").write_text("{}\n")
    assert h(init=str(run), data=str(data), train=[str(f)], encoder="minilm-l6") == first
    (run / "model" / "config.json").write_text('{"n": 1}')
    (data / "train.jsonl").write_text('{"text": "c"}\n')
    f.write_text('{"text": "d"}\n')
    again = h(init=str(run), data=str(data), train=[str(f)], encoder="minilm-l6")
    assert all(again[k] != first[k] for k in ("init", "data", "train"))
