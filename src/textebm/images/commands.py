"""`textebm ssl-images eval`: a trained image classifier's accuracy and error on images.

    textebm ssl-images eval --model runs/joint                       # digits' held-out test set
    textebm ssl-images eval --model runs/joint --data my.npz --split all --out eval.json

`--split test` is the held-out test set that training drew with the same --test-fraction and
--test-seed (the images no run of any labelled proportion trained on); `--split all` every image
of --data (a user's own test file). Runs in fp32; checks --out before any work, and the images'
shape against the model's (an error naming the file).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    data: str = field(default=DIGITS, metadata={"help": "images: `digits` or an .npz file with arrays X and y"})
    split: str = field(default="test", metadata={
        "help": "test: the held-out test set (--test-fraction, --test-seed as in training); all: every image",
        "choices": ["test", "all"]})
    test_fraction: float = field(default=0.2, metadata={"help": "held-out test images (as in training)",
                                                         "gt": 0, "lt": 1})
    test_seed: int = field(default=0, metadata={"help": "seed of the held-out test set (as in training)", "min": 0})
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
    data = load_images(cfg.data)
    check_shape(data, (model.spec.height, model.spec.width), f"--model {cfg.model}")
    if int(data.labels.max()) >= model.spec.outputs:
        raise TextebmError(f"--data {cfg.data}: labels go up to {int(data.labels.max())}, the model has "
                           f"{model.spec.outputs} classes")
    idx = test_indices(len(data), cfg.test_fraction, cfg.test_seed)[0] if cfg.split == "test" else list(range(len(data)))
    metrics = {"model": str(path.resolve()), "data": cfg.data, "data_sha256": data.sha256, "split": cfg.split,
               **accuracy(model, data.images[idx], data.labels[idx]), "precision": "fp32"}
    if cfg.out:
        write_json(cfg.out, metrics)
        mark_file(cfg.out, "ssl-images eval")
    return metrics

