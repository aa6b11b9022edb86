"""ssl-images commands: paper e's image methods (Song & Ou 2021, sec. 3.2-3.3) on 8x8 digits.

  textebm ssl-images train    --method supervised --labelled-proportion 0.05 --out runs/sup
  textebm ssl-images pretrain --labelled-proportion 0.05 --out runs/ebm
  textebm ssl-images train    --method pretrain --init runs/ebm --labelled-proportion 0.05 --out runs/pre
  textebm ssl-images train    --method joint --labelled-proportion 0.05 --out runs/joint
  textebm ssl-images eval     --model runs/joint

Training runs on the one loop (checkpoints, --resume); the EBMs sample by SGLD with a replay
buffer (JEM); a diverging EBM stops with exit 2 and keeps its last checkpoint. eval runs in fp32.
"""

from textebm.cli.show import eval_line, metrics_json
from textebm.images.commands import SSLImagesEvalConfig
from textebm.images.train import SSLImagesPretrainConfig, SSLImagesTrainConfig


def train(cfg: SSLImagesTrainConfig) -> None:
    """Train a classifier: --method supervised, pretrain (from an EBM, --init) or joint; test error at the end."""
    from textebm.images.train import ssl_images_train

    print(f"{cfg.out}: " + eval_line(ssl_images_train(cfg)))


def pretrain(cfg: SSLImagesPretrainConfig) -> None:
    """Stage 1 of pre-training: an EBM u(x) = w^T h(x) on the unlabelled images (SGLD, replay buffer)."""
    from textebm.images.train import ssl_images_pretrain

    print(f"{cfg.out}: " + eval_line(ssl_images_pretrain(cfg)))


def evaluate(cfg: SSLImagesEvalConfig) -> None:
    """Accuracy and error of an image classifier on the held-out test set (or every image)."""
    from textebm.images.commands import ssl_images_eval

    print(metrics_json(ssl_images_eval(cfg), leave_out=("model", "data_sha256")))


COMMANDS: dict = {
    "train": (SSLImagesTrainConfig, train),
    "pretrain": (SSLImagesPretrainConfig, pretrain),
    "eval": (SSLImagesEvalConfig, evaluate),
}
