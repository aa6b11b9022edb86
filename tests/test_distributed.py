"""The training loop under `accelerate launch` with 2 CPU processes (gloo): it trains, each process
sees half the batches, only the main process writes, checkpoints carry every rank's RNG, and a
killed 2-process run resumes to the same numbers as an uninterrupted one, also with extra data
streams (each process gets the batches of every stream that accelerate's sharding deals it)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from textebm.outputs import MARKER

HERE = Path(__file__).parent
TOY = HERE / "toy_train.py"
TIMEOUT = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str], env_extra: dict | None, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "ACCELERATE_USE_CPU": "1",  # no CUDA: MULTI_CPU state, gloo backend
           # and no GPU in sight: on a one-GPU machine, accelerate's barrier (device_ids=[rank])
           # failed rank 1 with a CUDA error (H200, accelerate 1.15, torch 2.11)
           "CUDA_VISIBLE_DEVICES": "",
           "HF_HOME": str(home),  # no user accelerate config file
           **(env_extra or {})}
    # own process group, so that a timeout also ends the launcher's worker processes
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{cmd} hung for {TIMEOUT}s\n{err[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def launch2(out: Path, *args: str, env_extra: dict | None = None, monitor: float = 0.1) -> subprocess.CompletedProcess:
    """toy_train.py under `accelerate launch` with 2 processes on CPU.

    `--cpu` alone would take accelerate's simple launcher (one process, or mpirun); the
    torchrun launcher (`--multi_gpu`) starts the 2 workers, and ACCELERATE_USE_CPU=1 keeps
    them on CPU, where accelerate picks gloo. `monitor`: how often (s) the launcher looks at
    its workers; it stops the others once one has failed.
    """
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--monitor_interval", str(monitor), "--main_process_port", str(free_port()), str(TOY), str(out), *args]
    return _run(cmd, env_extra, out.parent / "hf_home")


def run1(out: Path, *args: str) -> subprocess.CompletedProcess:
    """toy_train.py as a plain single process."""
    return _run([sys.executable, str(TOY), str(out), *args], None, out.parent / "hf_home")


def weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "model" / "model.safetensors"))


def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def untrained_mse() -> float:
    spec = importlib.util.spec_from_file_location("toy_train", TOY)
    toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toy)
    torch.manual_seed(0)  # as toy_train.main does before building the model
    model = toy.Toy().eval()
    ids, mask, y = toy.collate(toy.data())
    with torch.no_grad():
        return float(((model(ids, mask) - y) ** 2).mean())


@pytest.fixture(scope="module")
def two_proc(tmp_path_factory):
    """One uninterrupted 2-process run, kept checkpoint, logging every final-model save."""
    base = tmp_path_factory.mktemp("dist")
    run, save_log = base / "run", base / "saves.log"
    res = launch2(run, "--keep-checkpoint", "--save-log", str(save_log))
    return run, save_log, res


def test_two_processes_train_and_save_once(two_proc, tmp_path):
    run, save_log, res = two_proc
    assert res.returncode == 0, res.stderr[-4000:]

    # the final model was saved exactly once, by rank 0 of 2, over gloo; no temp dirs left behind
    assert save_log.read_text().splitlines() == ["0 2 gloo"]
    assert sorted(p.name for p in run.iterdir()) == sorted([MARKER, "checkpoint", "config.json", "metrics.json",
                                                            "model"])
    assert sorted(p.name for p in (run / "model").iterdir()) == ["model.safetensors"]
    w = weights(run)
    assert w and all(v.isfinite().all() for v in w.values())

    m = metrics(run)
    assert m["completed"] is True
    assert m["train"]["processes"] == 2

    # the loss went down: training history, and the final model against the untrained one
    h = m["train"]["history"]
    assert h[-1]["loss"] < h[0]["loss"]
    assert m["eval"]["mse"] < 0.5 * untrained_mse()

    # each process sees half the batches: 96 examples / 8 = 12 batches an epoch, 6 per process
    single = run1(tmp_path / "single")
    assert single.returncode == 0, single.stderr[-4000:]
    s1, s2 = metrics(tmp_path / "single")["train"], m["train"]
    assert s1["processes"] == 1
    assert (s1["steps"], s2["steps"]) == (36, 18)
    assert s2["epochs_completed"] == s1["epochs_completed"] == 3.0

    # the kept checkpoint (every 5 steps): last one at step 15 = epoch 2, 3rd of 6 batches per
    # process; one RNG file per rank, gathered onto rank 0
    ckpt = run / "checkpoint"
    state = json.loads((ckpt / "state.json").read_text())
    assert (state["step"], state["epoch"], state["batch_in_epoch"]) == (15, 2, 3)
    assert len(state["rng"]) == 2
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "model.safetensors", "optimizer.json", "optimizer.safetensors", "rng-0.safetensors",
        "rng-1.safetensors", "scheduler.json", "state.json"]
    for rank in (0, 1):
        assert load_file(str(ckpt / f"rng-{rank}.safetensors"))["torch"].dtype == torch.uint8
    assert all(v.isfinite().all() for v in load_file(str(ckpt / "model.safetensors")).values())


def test_two_processes_resume_after_kill_equals_uninterrupted(two_proc, tmp_path):
    full, _, res = two_proc
    assert res.returncode == 0, res.stderr[-4000:]
    cut, save_log = tmp_path / "cut", tmp_path / "saves.log"
    args = ("--keep-checkpoint", "--save-log", str(save_log))

    killed = launch2(cut, *args, "--kill-at", "12")
    assert killed.returncode != 0
    state = json.loads((cut / "checkpoint" / "state.json").read_text())
    assert state["step"] == 10  # last checkpoint before the kill
    assert not (cut / "model").exists() and not save_log.exists()

    resumed = launch2(cut, "--resume", *args)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert save_log.read_text().splitlines() == ["0 2 gloo"]
    a, b = weights(full), weights(cut)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k  # bitwise equal on CPU
    ma, mb = metrics(full), metrics(cut)
    assert ma["eval"] == mb["eval"]
    assert [x["loss"] for x in ma["train"]["history"]] == [x["loss"] for x in mb["train"]["history"]]
    assert mb["train"]["steps"] == 18 and mb["completed"] is True


def test_two_processes_streams_are_sharded_aligned_and_resume_exactly(two_proc, tmp_path):
    """The toy with a lockstep and a cycling stream on 2 processes: each rank gets, step by step,
    the batches accelerate's sharding deals it from every stream (aligned rounds, the cycling
    stream through its own epochs), the loss falls, and a killed run resumes to bitwise the
    same weights as an uninterrupted one, drawing the same batches. The recipe's own state (a
    buffer of its last predictions, `--buffer`) is each rank's, checkpointed and restored per rank."""
    import toy_train as toy

    full, cut = tmp_path / "full", tmp_path / "cut"
    res = launch2(full, "--streams", "--buffer", "--batch-log", str(tmp_path / "full.log"))
    assert res.returncode == 0, res.stderr[-4000:]
    logged = {r: [json.loads(x) for x in (tmp_path / f"full.log.{r}").read_text().splitlines()] for r in (0, 1)}
    for rank in (0, 1):
        assert logged[rank] == toy.expected_batches(3, 2, rank)
    h = metrics(full)["train"]["history"]
    assert metrics(full)["train"]["steps"] == 18 and h[-1]["loss"] < 0.5 * h[0]["loss"]

    killed = launch2(cut, "--streams", "--buffer", "--batch-log", str(tmp_path / "cut.log"), "--kill-at", "12")
    assert killed.returncode != 0 and not (cut / "model").exists()
    assert json.loads((cut / "checkpoint" / "state.json").read_text())["step"] == 10
    buffers = [load_file(str(cut / "checkpoint" / f"recipe-{r}.safetensors"))["buffer"] for r in (0, 1)]
    assert not torch.equal(*buffers)  # each rank's own
    resumed = launch2(cut, "--streams", "--buffer", "--batch-log", str(tmp_path / "cut.log"), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    a, b = weights(full), weights(cut)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(full)["train"]["history"] == metrics(cut)["train"]["history"]
    for rank in (0, 1):
        again = [json.loads(x) for x in (tmp_path / f"cut.log.{rank}").read_text().splitlines()]
        assert again[:10] + again[12:] == logged[rank]


def test_two_processes_refuse_an_existing_run_with_one_message_each(tmp_path):
    """Every process checks the run folder before anything is written, so both stop with the
    user-facing error (not one error and a gloo failure at the next barrier)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    # the launcher looks every 5 s, not 0.1 s: a process that fails first does not get the other
    # stopped before it reaches the same check (on a slow CPU their starts are ~0.1 s apart)
    res = launch2(run, monitor=5)
    assert res.returncode != 0
    assert res.stderr.count("exists, is not empty and was not written by textebm") == 2
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]  # nothing written


def test_two_process_joint_ebm_training(classify_fixture, tmp_path):
    """`classify train` with NCE under a 2-process launch: each process takes half the data
    batches with the noise stream's batches sharded alongside, and the classifier is saved once
    and loads."""
    d = classify_fixture
    args = ["classify", "train", "--data", str(d / "data"), "--encoder", str(d / "encoder"),
            "--energy", "hidden", "--noise", str(d / "noise.jsonl"), "--epochs", "2", "--batch-size", "16",
            "--precision", "fp32", "--no-progress", "--eval-split", ""]
    one = _run([sys.executable, "-m", "textebm", *args, "--out", str(tmp_path / "one")], None, tmp_path / "hf")
    assert one.returncode == 0, one.stderr[-3000:]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(free_port()), "-m", "textebm", *args, "--out", str(tmp_path / "two")]
    two = _run(cmd, None, tmp_path / "hf")
    assert two.returncode == 0, two.stderr[-3000:]
    m1, m2 = metrics(tmp_path / "one"), metrics(tmp_path / "two")
    assert m2["completed"] and m2["train"]["processes"] == 2
    assert m2["train"]["steps"] == m1["train"]["steps"] // 2 == 6  # 96 examples / 16 = 6 batches, 2 epochs
    assert all("nce" in h and h["nce"] > 0 for h in m2["train"]["history"])
    from textebm.models.load import load_classifier

    model, _ = load_classifier(tmp_path / "two")
    assert model.spec.energy == "hidden"
    assert all(torch.isfinite(p).all() for p in model.parameters())
