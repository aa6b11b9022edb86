"""`textebm ssl-images eval`: a trained image classifier's accuracy and error on images.

    textebm ssl-images eval --model runs/joint                       # digits' held-out test set
    textebm ssl-images eval --model runs/joint --data my.npz --split all --out eval.json

`--split test` is the held-out test set that training drew with the same --test-fraction and
--test-seed (the images no run of any labelled proportion trained on); `--split all` every image
of --data (a user's own test file). --data, --test-fraction and --test-seed default to the run's
own (RUN/config.json); a test set of the run's images drawn with another fraction or seed would
hold images it trained on, and is refused. Runs in fp32; checks --out before any work, and the
images' shape against the model's (an error naming the file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from textebm.errors import TextebmError
from textebm.images.data import DIGITS, check_shape, load_images, test_indices
from textebm.images.train import accuracy
from textebm.inference import inference_setup, set_threads
from textebm.io import write_json
from textebm.models.load import IMAGE_NET, find_model, load_convnet
from textebm.options import check_config, refuse_unused, threads_field
from textebm.outputs import check_output_file, mark_file


@dataclass(kw_only=True)
class SSLImagesEvalConfig:
    model: str = field(metadata={"help": "an image classifier: the run folder of `ssl-images train` (or its model/)"})
    data: str | None = field(default=None, metadata={
        "help": "images: `digits` or an .npz file with arrays X and y (default: the run's own, else digits)"})
    split: str = field(default="test", metadata={
        "help": "test: the held-out test set (--test-fraction, --test-seed as in training); all: every image",
        "choices": ["test", "all"]})
    test_fraction: float | None = field(default=None, metadata={
        "help": "held-out test images (default: the run's, else 0.2)", "gt": 0, "lt": 1})
    test_seed: int | None = field(default=None, metadata={
        "help": "seed of the held-out test set (default: the run's, else 0)", "min": 0})
    out: str = field(default="", metadata={"help": "also write the metrics to this JSON file"})
    threads: int = threads_field()
    overwrite: bool = field(default=False, metadata={"help": "replace an --out file of an earlier `ssl-images eval`"})

    def check(self) -> None:
        if self.split == "all":
            refuse_unused(self, ["test_fraction", "test_seed"], "with --split all (every image is scored)")
        if self.overwrite and not self.out:
            raise TextebmError("--overwrite has no effect without --out (nothing is written); leave it out")


def ssl_images_eval(cfg: SSLImagesEvalConfig) -> dict:
    """Accuracy and error of a classifier on the images; returns the metrics."""
    check_config(cfg)
    set_threads(cfg.threads)
    if cfg.out:
        check_output_file(cfg.out, cfg.overwrite, kind="ssl-images eval", inputs=[("--data", cfg.data)])
    device, _ = inference_setup("fp32")
    path = find_model(cfg.model, IMAGE_NET, "--model", ids=False).path
    model = load_convnet(path, dtype=torch.float32, device=device)
    if model.spec.head != "classifier":
        raise TextebmError(f"--model {cfg.model}: an EBM of `ssl-images pretrain` (no classes); fine-tune it with "
                           "`ssl-images train --method pretrain --init` first")
    run = _run_config(path)  # what the run trained on: the defaults
    source = cfg.data or run.get("data") or DIGITS
    fraction = cfg.test_fraction if cfg.test_fraction is not None else run.get("test_fraction", 0.2)
    seed = cfg.test_seed if cfg.test_seed is not None else run.get("test_seed", 0)
    data = load_images(source)
    check_shape(data, (model.spec.height, model.spec.width), f"--model {cfg.model}")
    if int(data.labels.max()) >= model.spec.outputs:
        raise TextebmError(f"--data {source}: labels go up to {int(data.labels.max())}, the model has "
                           f"{model.spec.outputs} classes")
    if (cfg.split == "test" and data.sha256 == run.get("data_sha256")
            and (fraction, seed) != (run.get("test_fraction"), run.get("test_seed"))):
        raise TextebmError(f"--test-fraction {fraction} --test-seed {seed}: a test set of the images --model "
                           f"{cfg.model} trained on, drawn otherwise than the run held its own out (--test-fraction "
                           f"{run.get('test_fraction')} --test-seed {run.get('test_seed')}): it would hold images the "
                           "model trained on; leave both out")
    idx = test_indices(len(data), fraction, seed)[0] if cfg.split == "test" else list(range(len(data)))
    metrics = {"model": str(path.resolve()), "data": source, "data_sha256": data.sha256, "split": cfg.split,
               **accuracy(model, data.images[idx], data.labels[idx]), "precision": "fp32"}
    if cfg.out:
        write_json(cfg.out, metrics)
        mark_file(cfg.out, "ssl-images eval")
    return metrics


def _run_config(model: Path) -> dict:
    """RUN/config.json of the run a model folder (RUN/model) belongs to; {} when there is none."""
    from textebm.io import read_json_object

    for record in (model.parent / "config.json", model / "config.json"):
        if record.is_file():
            try:
                config = read_json_object(record, "run config")
            except TextebmError:
                return {}
            return config if "data_sha256" in config or "test_seed" in config else {}
    return {}
