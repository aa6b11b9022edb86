"""The generic training loop: resume-after-kill equals an uninterrupted run, NaN stops the run,
checkpoints are safetensors + JSON, config mismatch on resume is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from textebm.checkpoint import optimizer_from_files, optimizer_to_files
from textebm.train import BucketBatchSampler, linear_schedule

HERE = Path(__file__).parent


def run_toy(out, *args, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, str(HERE / "toy_train.py"), str(out), *args],
                          capture_output=True, text=True, env=env)


def weights(run):
    return load_file(str(Path(run) / "model" / "model.safetensors"))


def test_resume_after_kill_equals_uninterrupted(tmp_path):
    full = run_toy(tmp_path / "full")
    assert full.returncode == 0, full.stderr
    killed = run_toy(tmp_path / "cut", env_extra={"TEXTEBM_KILL_AT_STEP": "17"})
    assert killed.returncode == 137
    state = json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())
    assert state["step"] == 15  # last checkpoint before the kill (every 5 steps)
    assert not (tmp_path / "cut" / "model").exists()
    resumed = run_toy(tmp_path / "cut", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a, b = weights(tmp_path / "full"), weights(tmp_path / "cut")
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]).all(), k  # bitwise equal on CPU
    ma = json.loads((tmp_path / "full" / "metrics.json").read_text())
    mb = json.loads((tmp_path / "cut" / "metrics.json").read_text())
    assert ma["eval"] == mb["eval"]
    assert [h["loss"] for h in ma["train"]["history"]] == [h["loss"] for h in mb["train"]["history"]]
    assert not (tmp_path / "cut" / "checkpoint").exists()  # removed after success


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
