"""lm commands: language models as noise models and generators.

  textebm lm sample --model RUN --data DIR --split train --mode infill --top-k 20 --out noise.jsonl
  textebm lm score  --model RUN --input texts.jsonl --out scores.jsonl
  textebm lm eval   --model RUN --data DIR --split test

Sampling, scoring and evaluation run on the GPU when there is one, in --precision (auto: bf16
where the hardware multiplies it natively, else fp32; the choice is logged at start).
"""

from textebm.lm.sample_command import SampleConfig, sample_file
from textebm.lm.eval_command import LMEvalConfig, LMScoreConfig, eval_split, score_file
from textebm.lm.train import LMTrainConfig


def train(cfg: LMTrainConfig) -> None:
    """Train a causal or infill LM from scratch or from a pretrained one (checkpoints, resume)."""
    from textebm.lm.train import lm_train

    m = lm_train(cfg)
    print(f"{cfg.out}: " + ", ".join(f"{k}={v:.4g}" for k, v in m.get("eval", {}).items()))


def sample(cfg: SampleConfig) -> None:
    """Top-k samples per example: masked infill, prefix/suffix completion or free (resumable)."""
    sample_file(cfg)


def score(cfg: LMScoreConfig) -> None:
    """log P(x) of each text, per token and in total ([eos] included)."""
    score_file(cfg)


def evaluate(cfg: LMEvalConfig) -> None:
    """Perplexity on a split (per token and per word), merged into RUN/metrics.json."""
    eval_split(cfg)


COMMANDS: dict = {
    "train": (LMTrainConfig, train),
    "sample": (SampleConfig, sample),
    "score": (LMScoreConfig, score),
    "eval": (LMEvalConfig, evaluate),
}
