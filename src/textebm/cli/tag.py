"""tag commands: paper e's BiLSTM-CRF taggers (Song & Ou 2021).

  textebm tag train   --data data/brown-pos --out runs/pos --method supervised --labelled 2500
  textebm tag train   --data data/brown-pos --out runs/joint --method joint --init runs/pos --labelled 2500 --ratio 50
  textebm tag eval    --model runs/pos --data data/wsj-pos --split test
  textebm tag predict --model runs/pos --input sentences.jsonl --out tagged.conll
  textebm tag grid    --config bench/tagging/cpu.json --out runs/tag-grid [--plan] [--shard 1/2]

Training runs on the one loop (checkpoints, --resume); eval and predict run in fp32.
"""

from textebm.cli.show import eval_line, metrics_json
from textebm.tagging.commands import TagEvalConfig, TagPredictConfig
from textebm.tagging.grid import TagGridConfig
from textebm.tagging.train import TagTrainConfig


def train(cfg: TagTrainConfig) -> None:
    """Train a BiLSTM-CRF tagger (--method supervised | pretrain | joint), dev accuracy (and span F1
    for a BIO tag set) after each epoch."""
    from textebm.tagging.train import tag_train

    print(f"{cfg.out}: " + eval_line(tag_train(cfg)))


def evaluate(cfg: TagEvalConfig) -> None:
    """Token accuracy (and span F1 for BIO tags) of a tagger on a split."""
    from textebm.tagging.commands import tag_eval

    print(metrics_json(tag_eval(cfg), leave_out=("model", "data")))


def predict(cfg: TagPredictConfig) -> None:
    """Tag sentences into a CoNLL file (token, predicted tag)."""
    from textebm.tagging.commands import tag_predict

    tag_predict(cfg)


def grid(cfg: TagGridConfig) -> None:
    """Paper e's semi-supervised grid (tables 3 and 4) from a config: every cell cached; results.json, tables.md."""
    from textebm.tagging.grid import run_grid

    report = run_grid(cfg)
    if report:
        print(f"{len(report['cells'])} cells; tables in {cfg.out}/tables.md")


COMMANDS: dict = {
    "train": (TagTrainConfig, train),
    "eval": (TagEvalConfig, evaluate),
    "predict": (TagPredictConfig, predict),
    "grid": (TagGridConfig, grid),
}
