"""Training checkpoints as safetensors + JSON, written atomically; nothing is ever unpickled.

Layout of `RUN/checkpoint/`:
  model.safetensors       model weights (`save_weights`: a tied parameter once, as safetensors'
                          save_model stores it)
  optimizer.safetensors   optimizer state tensors, keys `state.{param_index}.{name}`
  optimizer.json          optimizer param_groups and the non-tensor state
  scheduler.json          LR scheduler state_dict
  rng-{rank}.safetensors  torch CPU (and CUDA) RNG state of each process
  recipe-{rank}.safetensors  the training recipe's own tensors on each process (`Recipe.state`),
                          when it has any (e.g. a replay buffer)
  state.json              step, epoch, batch in epoch, python/numpy RNG state, metric history

and, under `--keep-best`, `RUN/best/`: model.safetensors and best.json (its step, epoch and
validation loss), the weights of the best validation so far.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from textebm.errors import TextebmError
from textebm.io import atomic_dir, atomic_write, read_json

CHECKPOINT_DIR = "checkpoint"
BEST_DIR = "best"


def optimizer_to_files(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, st in sd["state"].items():
        for name, value in st.items():
            if torch.is_tensor(value):
                tensors[f"state.{idx}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[name] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def optimizer_from_files(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, idx, name = key.split(".", 2)
        state.setdefault(int(idx), {})[name] = value
    for idx, st in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(st)
    return {"state": state, "param_groups": meta["param_groups"]}


def rng_state() -> tuple[dict[str, torch.Tensor], dict]:
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda.{i}"] = s
    np_state = np.random.get_state()
    py_state = random.getstate()
    return tensors, {
        "python": [py_state[0], list(py_state[1]), py_state[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
    }


def set_rng_state(tensors: dict[str, torch.Tensor], meta: dict) -> None:
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    v, st, g = meta["python"]
    random.setstate((v, tuple(st), g))
    name, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def save_checkpoint(run_dir: Path, model: torch.nn.Module, optimizer, scheduler, state: dict,
                    rng_by_rank: list[tuple[dict, dict]], extra_by_rank: list[dict[str, torch.Tensor]] = ()
                    ) -> Path:
    """Write RUN/checkpoint atomically (the previous checkpoint stays until the new one is whole)."""
    target = Path(run_dir) / CHECKPOINT_DIR
    with atomic_dir(target) as tmp:
        save_weights(model, tmp / "model.safetensors")
        opt_tensors, opt_meta = optimizer_to_files(optimizer)
        save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
        _write(tmp / "optimizer.json", opt_meta)
        _write(tmp / "scheduler.json", scheduler.state_dict())
        rng_meta = []
        for rank, (tensors, meta) in enumerate(rng_by_rank):
            save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp / f"rng-{rank}.safetensors"))
            rng_meta.append(meta)
        for rank, tensors in enumerate(extra_by_rank):
            if tensors:
                save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp / f"recipe-{rank}.safetensors"))
        _write(tmp / "state.json", {**state, "rng": rng_meta})
    return target


def has_checkpoint(run_dir: Path) -> bool:
    """Whether RUN holds a finished checkpoint (its state.json is written last)."""
    return (Path(run_dir) / CHECKPOINT_DIR / "state.json").is_file()


def load_checkpoint(run_dir: Path, model: torch.nn.Module, optimizer, scheduler, rank: int = 0) -> dict:
    """Restore weights, optimizer, scheduler and this process's RNG; return state.json."""
    ckpt = Path(run_dir) / CHECKPOINT_DIR
    if not has_checkpoint(run_dir):
        raise TextebmError(f"{ckpt}: no checkpoint to resume from")
    missing, unexpected = load_weights(model, ckpt / "model.safetensors")
    if missing or unexpected:
        raise TextebmError(f"{ckpt}/model.safetensors does not match the model "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    device = next(model.parameters()).device
    opt_tensors = load_file(str(ckpt / "optimizer.safetensors"), device=str(device))
    optimizer.load_state_dict(optimizer_from_files(opt_tensors, read_json(ckpt / "optimizer.json")))
    scheduler.load_state_dict(read_json(ckpt / "scheduler.json"))
    state = read_json(ckpt / "state.json")
    rng_file = ckpt / f"rng-{rank}.safetensors"
    if rng_file.is_file() and rank < len(state["rng"]):
        set_rng_state(load_file(str(rng_file)), state["rng"][rank])
    return state


def save_best(run_dir: Path, model: torch.nn.Module, entry: dict) -> None:
    """Write RUN/best atomically: the weights of the best validation so far and its `entry`."""
    with atomic_dir(Path(run_dir) / BEST_DIR) as tmp:
        save_weights(model, tmp / "model.safetensors")
        _write(tmp / "best.json", entry)


def load_best(run_dir: Path, model: torch.nn.Module) -> dict | None:
    """Load RUN/best's weights into `model` and return its entry; None when there is none."""
    best = Path(run_dir) / BEST_DIR
    if not (best / "best.json").is_file():
        return None
    missing, unexpected = load_weights(model, best / "model.safetensors")
    if missing or unexpected:
        raise TextebmError(f"{best}/model.safetensors does not match the model "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    return read_json(best / "best.json")


def load_extra_state(run_dir: Path, rank: int = 0) -> dict[str, torch.Tensor]:
    """This process's recipe tensors from RUN/checkpoint (none when the recipe kept none)."""
    f = Path(run_dir) / CHECKPOINT_DIR / f"recipe-{rank}.safetensors"
    return load_file(str(f)) if f.is_file() else {}


def tied_groups(model: torch.nn.Module) -> list[list[str]]:
    """The names of each parameter that the model holds under more than one name (tied weights:
    one Parameter object), each group sorted."""
    names: dict[int, list[str]] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(n)
    return [sorted(g) for g in names.values() if len(g) > 1]


def save_weights(model: torch.nn.Module, path: str | Path) -> None:
    """The model's weights as one safetensors file, as `safetensors.torch.save_model` writes it
    (the same bytes wherever it works): a tied parameter once, under the first of its names in
    sorted order, the others named in the metadata. Unlike save_model, every tensor is written
    from its own copy: on a GPU, cuDNN keeps an LSTM's weights as views of one flat buffer, which
    save_model refuses ("None is covering the entire storage")."""
    state = model.state_dict()
    metadata: dict[str, str] = {}
    for keep, *drop in tied_groups(model):
        for name in drop:
            metadata[name] = keep
            del state[name]
    # a copy in host memory each (from a GPU: the one copy to the host, no second one on the device)
    save_file({k: v.detach().to("cpu", copy=True).contiguous() for k, v in state.items()},
              str(path), metadata=metadata or None)


def load_weights(model: torch.nn.Module, path: str | Path) -> tuple[list[str], list[str]]:
    """Load a file of `save_weights` (or of safetensors' save_model) into `model`, in place, on
    whatever device it sits; return (missing, unexpected) names, a tied parameter counted present
    when the file holds it under any of its names."""
    state = load_file(str(path))
    missing, unexpected = model.load_state_dict(state, strict=False)
    held = {n for group in tied_groups(model) if any(k in state for k in group) for n in group}
    return [m for m in missing if m not in held], list(unexpected)


def _write(path: Path, obj: Any) -> None:
    with atomic_write(path) as f:
        json.dump(obj, f)
