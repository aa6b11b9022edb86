"""`textebm ssl-images train` and `ssl-images pretrain`: paper e's three image methods (Song & Ou
2021, sec. 3.2-3.3) on one small convolutional network (`models/convnet.py`).

    textebm ssl-images train --method supervised --labelled-proportion 0.05 --out runs/sup
    textebm ssl-images pretrain --labelled-proportion 0.05 --out runs/ebm          # stage 1
    textebm ssl-images train --method pretrain --init runs/ebm --labelled-proportion 0.05 --out runs/pre
    textebm ssl-images train --method joint --labelled-proportion 0.05 --out runs/joint

The images (`--data digits`, scikit-learn's, or an .npz of X and y) are split by `images/data.py`:
a seeded held-out test set, and the rest's nested labelled set of `--labelled-proportion`; the
other training images are the unlabelled ones.

- `supervised`: softmax(W h(x)) on the labelled images, cross-entropy.
- `pretrain`, stage 1 (`ssl-images pretrain`): an EBM u(x) = wᵀh(x) on the unlabelled images by
  maximum likelihood, negatives from SGLD chains with a replay buffer (JEM; `images/sampler.py`);
  stage 2 (`train --method pretrain --init EBM`): w dropped, a new softmax(W h(x)) on the network
  initialised from the EBM's body, every weight trained on the labelled images.
- `joint`: u(x, y) = Ψ(x)[y]: cross-entropy of softmax(Ψ(x)) on the labelled images (the main
  stream) plus `--ebm-weight` times the maximum-likelihood loss of the marginal
  u(x) = logsumexp_y Ψ(x)[y] on the unlabelled images (a second, cycling stream), SGLD negatives.

All run on the one loop (`textebm.train`: checkpoints, --resume; the replay buffer and the
sampler's generator are in the checkpoint). A run is --max-steps optimizer steps long (default
400), whatever the labelled set's size. At the end RUN/metrics.json holds the test accuracy and
error (fp32) and RUN/report.md a short summary. A diverging EBM (an energy past --max-energy or
not finite) stops with exit 2 and keeps its last checkpoint.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from textebm.data.batching import Stream
from textebm.errors import TextebmError
from textebm.fingerprint import folder_sha256
from textebm.images.data import (
    DIGITS,
    ImageData,
    SSLSplit,
    check_shape,
    load_images,
    ssl_split,
)
from textebm.images.sampler import ChainSampler
from textebm.io import atomic_write, read_json_object, write_json
from textebm.losses.ebm import ebm_ml_loss, joint_ssl_loss, marginal_potential
from textebm.markdown import table
from textebm.models.convnet import (
    ConvNet,
    ConvNetSpec,
    classifier_from_ebm,
    save_convnet,
)
from textebm.models.load import IMAGE_NET, find_model, load_convnet
from textebm.options import check_config, options_dict, refuse_unused
from textebm.precision import cpu_name
from textebm.runfolder import check_run_dir
from textebm.seeds import derive_seed
from textebm.train import MAIN, Recipe, seed_everything, train, TrainOptions

log = logging.getLogger(__name__)

METHODS = ["supervised", "pretrain", "joint"]
SPLIT_FILE = "split.json"  # in an EBM's model folder: the split whose unlabelled images it was trained on
REPORT = "report.md"
SPLIT_KEYS = ("data_sha256", "test_fraction", "test_seed", "labelled_proportion", "split_seed")


@dataclass(kw_only=True)
class SplitOptions:
    """The images and their split, shared by every ssl-images command."""

    data: str = field(default=DIGITS, metadata={
        "help": "images: `digits` (scikit-learn's 8x8 digits, offline) or an .npz file with arrays X (N, H, W) "
                "and y (N,)"})
    test_fraction: float = field(default=0.2, metadata={"help": "held-out test images (a seeded fraction)",
                                                         "gt": 0, "lt": 1})
    test_seed: int = field(default=0, metadata={"help": "seed of the held-out test set", "min": 0})
    labelled_proportion: float = field(default=0.1, metadata={
        "help": "labelled fraction of the training images (nested: 0.02 of them lie inside 0.05); the rest "
                "are unlabelled", "gt": 0, "max": 1})
    split_seed: int = field(default=0, metadata={"help": "seed of the labelled set", "min": 0})


@dataclass(kw_only=True)
class SGLDOptions:
    """The EBM's training: JEM's SGLD with a replay buffer."""

    sgld_steps: int = field(default=20, metadata={"help": "SGLD steps per batch of negative samples", "min": 1})
    sgld_step_size: float = field(default=1.0, metadata={"help": "SGLD step on the energy's gradient (JEM: 1)",
                                                          "gt": 0})
    sgld_noise: float = field(default=0.01, metadata={"help": "SGLD noise standard deviation (JEM: 0.01)",
                                                       "min": 0})
    buffer_size: int = field(default=10000, metadata={"help": "replay buffer: stored chains", "min": 1})
    reinit: float = field(default=0.05, metadata={"help": "chance that a chain restarts from uniform noise",
                                                   "min": 0, "max": 1})
    samples: int = field(default=64, metadata={"help": "SGLD samples per step", "min": 1})
    data_noise: float = field(default=0.03, metadata={
        "help": "Gaussian noise added to the unlabelled images the EBM is fitted to (JEM: 0.03)", "min": 0})
    energy_reg: float = field(default=0.0, metadata={
        "help": "penalty on the energies' size, energy_reg * mean(u^2) (Du & Mordatch; 0: off)", "min": 0})
    max_energy: float = field(default=1e4, metadata={
        "help": "stop the run (exit 2, last checkpoint kept) when |u(x)| of the data or the samples exceeds this",
        "gt": 0})


SGLD_FIELDS = [f for f in SGLDOptions.__dataclass_fields__]


@dataclass(frozen=True, kw_only=True)
class EBMSpec:
    """How a recipe fits an EBM term to images: JEM's noise on the data, SGLD samples per step (from
    the recipe's `ChainSampler`), the penalty on the energies' size, and (joint) the term's weight."""

    data_noise: float  # std of the Gaussian noise added to the images the EBM is fitted to
    samples: int  # SGLD samples per step
    energy_reg: float = 0.0  # energy_reg * mean(u^2)
    weight: float = 1.0  # joint: the marginal's maximum-likelihood loss weight


def ebm_spec(cfg: SGLDOptions, weight: float = 1.0) -> EBMSpec:
    return EBMSpec(data_noise=cfg.data_noise, samples=cfg.samples, energy_reg=cfg.energy_reg, weight=weight)


@dataclass(kw_only=True)
class NetOptions:
    channels: int = field(default=32, metadata={"help": "channels of the first convolution", "min": 1})
    hidden: int = field(default=128, metadata={"help": "size of the features h(x)", "min": 1})


@dataclass(kw_only=True)
class ImageTrainOptions(TrainOptions):
    """The loop's options with this system's defaults: runs are --max-steps long."""

    epochs: float = field(default=10000.0, metadata={"help": "a cap on passes over the labelled images (the run "
                                                             "is --max-steps long)", "gt": 0})
    max_steps: int = field(default=400, metadata={"help": "optimizer steps", "min": 1})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate (AdamW)", "gt": 0})
    warmup: float = field(default=0.05, metadata={"help": "warm-up fraction of all steps", "min": 0, "lt": 1})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay", "min": 0})
    batch_size: int = field(default=32, metadata={"help": "labelled images per batch (pretrain: unlabelled)",
                                                  "min": 1})
    precision: str = field(default="fp32", metadata={
        "help": "fp32 (default: SGLD's gradients in x want it), bf16, fp16 (CUDA), or auto",
        "choices": ["auto", "fp32", "bf16", "fp16"]})
    checkpoint_every: int = field(default=100, metadata={"help": "save a checkpoint every N steps", "min": 1})
    log_every: int = field(default=10, metadata={"help": "record the loss every N steps", "min": 1})
    progress: bool = field(default=False, metadata={"help": "show a progress bar"})


@dataclass(kw_only=True)
class SSLImagesTrainConfig(ImageTrainOptions, SplitOptions, SGLDOptions, NetOptions):
    COMMAND: ClassVar[str] = "ssl-images train"
    method: str = field(default="supervised", metadata={
        "help": "supervised: softmax(W h) on the labelled images; pretrain: the same, the network initialised "
                "from --init (an EBM of `ssl-images pretrain`); joint: softmax(Psi(x)) on the labelled images "
                "plus the marginal logsumexp_y Psi(x)[y] as an EBM of the unlabelled ones", "choices": METHODS})
    init: str = field(default="", metadata={"help": "--method pretrain: the EBM run of `ssl-images pretrain` "
                                                    "(RUN or RUN/model) on the same split"})
    unlabelled_batch_size: int = field(default=64, metadata={"help": "--method joint: unlabelled images per step",
                                                             "min": 1})
    ebm_weight: float = field(default=1.0, metadata={
        "help": "--method joint: weight of the marginal's maximum-likelihood loss", "gt": 0})

    def check(self) -> None:
        super().check()
        if self.method != "joint":
            refuse_unused(self, ["unlabelled_batch_size", "ebm_weight", *SGLD_FIELDS],
                          f"with --method {self.method} (no EBM is trained; --method joint trains one)")
        if self.method != "pretrain":
            refuse_unused(self, ["init"], f"with --method {self.method} (it is --method pretrain's EBM)")
        else:
            refuse_unused(self, ["channels", "hidden"], "with --method pretrain (the network is --init's)")
            if not self.init:
                raise TextebmError("--method pretrain needs --init: the EBM run of `ssl-images pretrain` on the "
                                   "same split (stage 1 of sec. 3.2)")


@dataclass(kw_only=True)
class SSLImagesPretrainConfig(ImageTrainOptions, SplitOptions, SGLDOptions, NetOptions):
    COMMAND: ClassVar[str] = "ssl-images pretrain"
    batch_size: int = field(default=64, metadata={"help": "unlabelled images per batch", "min": 1})


def split_record(data: ImageData, opts: SplitOptions) -> dict:
    """What keys a split: the images' content and the split's options."""
    return {"data_sha256": data.sha256, "test_fraction": opts.test_fraction, "test_seed": opts.test_seed,
            "labelled_proportion": opts.labelled_proportion, "split_seed": opts.split_seed}


def _read(opts: SplitOptions) -> tuple[ImageData, SSLSplit]:
    data = load_images(opts.data)
    split = ssl_split(len(data), opts.test_fraction, opts.test_seed, opts.labelled_proportion, opts.split_seed)
    return data, split


def _sampler(cfg: SGLDOptions, shape: tuple[int, int], seed: int) -> ChainSampler:
    return ChainSampler(shape, cfg.buffer_size, cfg.reinit, cfg.sgld_steps, cfg.sgld_step_size, cfg.sgld_noise,
                        cfg.max_energy, seed)


def prepare_train(cfg: SSLImagesTrainConfig) -> tuple[Recipe, dict]:
    """(recipe, config.json) of `ssl-images train`, after every check and before anything is written."""
    check_config(cfg)
    check_run_dir(cfg, None)  # a bad --out fails before the images are read
    data, split = _read(cfg)
    if cfg.method == "pretrain" and not split.unlabelled:
        raise TextebmError(f"--labelled-proportion {cfg.labelled_proportion:g} leaves no unlabelled image; "
                           f"--method {cfg.method} needs some (use a smaller proportion, or --method supervised)")
    if cfg.method == "joint" and not split.unlabelled:
        log.info("--labelled-proportion %g: no unlabelled image; the EBM term p(x) runs on the labelled images, as "
                 "the paper's figure 1 does at 100 %% of the labels (and JEM)", cfg.labelled_proportion)
    seed_everything(cfg.seed)
    config = {**options_dict(cfg), **split_record(data, cfg), "labelled_images": len(split.labelled),
              "unlabelled_images": len(split.unlabelled), "test_images": len(split.test)}
    if cfg.method == "joint":
        config["ebm_images"] = "unlabelled" if split.unlabelled else "labelled"
    if cfg.method == "pretrain":
        model = init_from_ebm(cfg.init, data, cfg, derive_seed(cfg.seed, "ssl-images", "new-head"))
        config["init_sha256"] = folder_sha256(find_model(cfg.init, IMAGE_NET, "--init", ids=False).path)
    else:
        h, w = data.shape
        model = ConvNet(ConvNetSpec(height=h, width=w, outputs=len(data.classes), channels=cfg.channels,
                                    hidden=cfg.hidden, classes=data.classes))
    config["parameters"] = sum(p.numel() for p in model.parameters())
    if cfg.method == "joint":
        # p(x) on the unlabelled images; with every image labelled, on the labelled ones (figure 1 at 100 %)
        ebm_images = split.unlabelled or split.labelled
        if len(ebm_images) < cfg.unlabelled_batch_size:
            raise TextebmError(f"--unlabelled-batch-size {cfg.unlabelled_batch_size}: only {len(ebm_images)} "
                               "unlabelled images; use a smaller batch or a smaller --labelled-proportion")
        recipe: Recipe = ImageJointRecipe(model, data, split, ebm_images, cfg.unlabelled_batch_size,
                                          ebm_spec(cfg, cfg.ebm_weight), _sampler(cfg, data.shape, cfg.seed), cfg.seed)
    else:
        recipe = ClassifierRecipe(model, data, split)
    return recipe, config


def init_from_ebm(init: str, data: ImageData, opts: SplitOptions, seed: int) -> ConvNet:
    """Sec. 3.2's stage 2 start: the EBM at `init` (checked: an energy head, the same images and
    split), its body under a new output layer for the data's classes."""
    path = find_model(init, IMAGE_NET, "--init", ids=False).path
    ebm = load_convnet(path, dtype=torch.float32, option="--init")
    if ebm.spec.head != "energy":
        raise TextebmError(f"--init {init}: a classifier, not an EBM; pass the run of `ssl-images pretrain`")
    check_shape(data, (ebm.spec.height, ebm.spec.width), f"--init {init}")
    raw = read_json_object(path / SPLIT_FILE, "the EBM's split") if (path / SPLIT_FILE).is_file() else {}
    want = split_record(data, opts)
    diff = [k for k in SPLIT_KEYS if raw.get(k) != want[k]]
    if diff:
        raise TextebmError(f"--init {init}: the EBM was trained on another split ({', '.join(diff)} differ: "
                           + ", ".join(f"{k} {raw.get(k)!r} here {want[k]!r}" for k in diff)
                           + "); its unlabelled images must be this run's, so that no test image was seen")
    return classifier_from_ebm(ebm, data.classes, torch.Generator().manual_seed(seed)).train()


def ssl_images_train(cfg: SSLImagesTrainConfig) -> dict:
    """Train one method (see the module doc); returns metrics.json."""
    recipe, config = prepare_train(cfg)
    metrics = train(cfg, config, recipe)
    write_report(Path(cfg.out), config, metrics)
    return metrics


def prepare_pretrain(cfg: SSLImagesPretrainConfig) -> tuple[Recipe, dict]:
    check_config(cfg)
    check_run_dir(cfg, None)
    data, split = _read(cfg)
    if not split.unlabelled:
        raise TextebmError(f"--labelled-proportion {cfg.labelled_proportion:g} leaves no unlabelled image to "
                           "pre-train on; use a smaller proportion")
    seed_everything(cfg.seed)
    h, w = data.shape
    model = ConvNet(ConvNetSpec(height=h, width=w, outputs=1, head="energy", channels=cfg.channels,
                                hidden=cfg.hidden))
    record = split_record(data, cfg)
    config = {**options_dict(cfg), **record, "method": "pretrain (stage 1: the EBM)",
              "unlabelled_images": len(split.unlabelled), "parameters": sum(p.numel() for p in model.parameters())}
    return EBMRecipe(model, data, split, ebm_spec(cfg), _sampler(cfg, data.shape, cfg.seed), cfg.seed, record), config


def ssl_images_pretrain(cfg: SSLImagesPretrainConfig) -> dict:
    """Stage 1 of sec. 3.2: the EBM u(x) = wᵀh(x) on the unlabelled images; returns metrics.json."""
    recipe, config = prepare_pretrain(cfg)
    metrics = train(cfg, config, recipe)
    write_report(Path(cfg.out), config, metrics)
    return metrics


def _items(data: ImageData, idx: list[int]) -> list[tuple[torch.Tensor, int]]:
    return [(data.images[i], int(data.labels[i])) for i in idx]


def _collate(items: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    return {"x": torch.stack([x for x, _ in items]), "y": torch.tensor([y for _, y in items])}  # (B, H, W), (B,)


@torch.no_grad()
def accuracy(model: ConvNet, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 256) -> dict[str, float]:
    """Accuracy and error of a classifier on images (N, H, W), labels (N,), in fp32 (autocast off)."""
    model.eval()
    device = next(model.parameters()).device
    right = 0
    with torch.autocast(device.type, enabled=False):
        for s in range(0, len(images), batch_size):
            logits = model(images[s:s + batch_size].to(device).float())  # (b, K)
            right += int((logits.argmax(-1).cpu() == labels[s:s + batch_size]).sum())
    acc = right / len(images)
    return {"accuracy": acc, "error": 1.0 - acc, "images": len(images)}


def held_out_accuracy(model: ConvNet, data: ImageData, split: SSLSplit) -> dict[str, float]:
    """The held-out test images' accuracy and error (metrics.json's `eval`)."""
    return {f"test_{k}": v for k, v in accuracy(model, data.images[split.test], data.labels[split.test]).items()}


def data_noise_generator(seed: int) -> torch.Generator:
    """The generator of JEM's noise on the images an EBM is fitted to (`noisy`), kept in checkpoints."""
    return torch.Generator().manual_seed(derive_seed(seed, "ssl-images", "data-noise"))


class ClassifierRecipe(Recipe):
    """softmax(W h(x)) on the labelled images (supervised, and pre-training's stage 2)."""

    def __init__(self, model: ConvNet, data: ImageData, split: SSLSplit):
        self.model, self.data, self.split = model, data, split
        self.dataset = _items(data, split.labelled)
        self.lengths = [1] * len(self.dataset)
        self.collate = _collate
        self.run_files = (REPORT,)

    def loss(self, model, batch, at):
        ce = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
        return ce, {}

    def evaluate(self):
        return held_out_accuracy(self.model, self.data, self.split)

    def save(self, folder):
        save_convnet(self.model, folder)


class ImageJointRecipe(Recipe):
    """Joint training: cross-entropy of softmax(Ψ(x)) on labelled batches (the main stream) +
    `spec.weight` times the maximum-likelihood loss of the marginal logsumexp_y Ψ(x)[y] on batches
    of `ebm_images` (the stream "unlabelled", cycling), with SGLD negatives from `sampler`."""

    def __init__(self, model: ConvNet, data: ImageData, split: SSLSplit, ebm_images: list[int], ebm_batch_size: int,
                 spec: EBMSpec, sampler: ChainSampler, seed: int):
        self.model, self.data, self.split, self.spec, self.sampler = model, data, split, spec, sampler
        self.dataset = _items(data, split.labelled)
        self.lengths = [1] * len(self.dataset)
        self.collate = _collate
        self.run_files = (REPORT,)
        unl = _items(data, ebm_images)
        self.streams = {"unlabelled": Stream(dataset=unl, lengths=[1] * len(unl), collate=_collate,
                                             batch_size=ebm_batch_size, lockstep=False)}
        self.noise = data_noise_generator(seed)

    def loss(self, model, batch, at):
        lab, unl = batch[MAIN], batch["unlabelled"]
        x_unl = noisy(unl["x"], self.spec.data_noise, self.noise)  # (U, H, W)
        x_neg = self.sampler.sample(lambda x: -self.model.potential(x), self.spec.samples, at.step,
                                    device=x_unl.device)  # (N, H, W)
        logits = model(torch.cat([lab["x"], x_unl, x_neg]))  # (B + U + N, K)
        b, u = lab["x"].shape[0], x_unl.shape[0]
        total, ce, ml = joint_ssl_loss(logits[:b], lab["y"], logits[b:b + u], logits[b + u:], self.spec.weight,
                                       self.spec.energy_reg)
        u_all = marginal_potential(logits[b:]).detach()  # (U + N,)
        self.sampler.check(u_all[:u], u_all[u:], at.step)
        return total, {"ce": float(ce.detach()), "ml": float(ml.detach()), "u_data": float(u_all[:u].mean()),
                       "u_samples": float(u_all[u:].detach().mean())}

    def evaluate(self):
        return held_out_accuracy(self.model, self.data, self.split)

    def state(self):
        return {**self.sampler.state(), "noise_generator": self.noise.get_state()}

    def load_state(self, tensors):
        self.sampler.load_state(tensors)
        self.noise.set_state(tensors["noise_generator"].to(torch.uint8))

    def save(self, folder):
        save_convnet(self.model, folder)


def noisy(x: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
    """x + std · ε (JEM's noise on the data the EBM fits), ε from `generator`; x itself when std is 0."""
    if not std:
        return x
    return x + std * torch.randn(x.shape, generator=generator).to(x.device, x.dtype)


class EBMRecipe(Recipe):
    """Stage 1 of pre-training: u(x) = wᵀh(x) on the unlabelled images by maximum likelihood."""

    def __init__(self, model: ConvNet, data: ImageData, split: SSLSplit, spec: EBMSpec, sampler: ChainSampler,
                 seed: int, record: dict):
        self.model, self.data, self.split, self.spec, self.sampler, self.record = model, data, split, spec, sampler, record
        self.dataset = _items(data, split.unlabelled)
        self.lengths = [1] * len(self.dataset)
        self.collate = _collate
        self.run_files = (REPORT,)
        self.noise = data_noise_generator(seed)

    def loss(self, model, batch, at):
        x = noisy(batch["x"], self.spec.data_noise, self.noise)  # (B, H, W)
        x_neg = self.sampler.sample(lambda z: -self.model.potential(z), self.spec.samples, at.step,
                                    device=x.device)  # (N, H, W)
        u = model(torch.cat([x, x_neg]))[:, 0]  # (B + N,)
        b = x.shape[0]
        self.sampler.check(u[:b], u[b:], at.step)
        loss = ebm_ml_loss(u[:b], u[b:], self.spec.energy_reg)
        return loss, {"u_data": float(u[:b].detach().mean()), "u_samples": float(u[b:].detach().mean())}

    @torch.no_grad()
    def evaluate(self):
        """Mean u(x) of the test images and of the buffer's samples (fp32): a fitted EBM puts the
        data above its samples."""
        device = next(self.model.parameters()).device
        with torch.autocast(device.type, enabled=False):
            u_test = self.model.potential(self.data.images[self.split.test].to(device)).mean()
            u_buf = self.model.potential(self.sampler.buffer.samples[:1024].to(device)).mean()
        return {"test_mean_potential": float(u_test), "buffer_mean_potential": float(u_buf)}

    def state(self):
        return {**self.sampler.state(), "noise_generator": self.noise.get_state()}

    def load_state(self, tensors):
        self.sampler.load_state(tensors)
        self.noise.set_state(tensors["noise_generator"].to(torch.uint8))

    def save(self, folder):
        save_convnet(self.model, folder)
        write_json(Path(folder) / SPLIT_FILE, self.record)


def write_report(run: Path, config: dict, metrics: dict) -> None:
    """RUN/report.md: what was trained on what, and the test figures."""
    ev, tr = metrics.get("eval", {}), metrics.get("train", {})
    images = (f"{config.get('labelled_images', '-')} / {config['unlabelled_images']} / "
              f"{ev.get('test_images', config.get('test_images', '-'))}")
    precision = f"{tr.get('precision')} ({cpu_name()}, torch CPU capability {metrics['precision_choice']['cpu_capability']})"
    rows = [["method", config.get("method")], ["data", f"{config['data']} (sha256 {config['data_sha256'][:12]})"],
            ["labelled proportion", f"{config['labelled_proportion']:g}"],
            ["labelled / unlabelled / test images", images],
            ["steps", tr.get("steps")], ["wall time", f"{tr.get('wall_seconds', 0):.1f} s"],
            ["precision", precision]]
    rows += [[k.replace("_", " "), f"{v:.4f}" if isinstance(v, float) else v] for k, v in ev.items()]
    text = f"# ssl-images: {config.get('method')}\n\n" + table(["", ""], rows) + "\n"
    with atomic_write(run / REPORT) as f:
        f.write(text)

