"""Cloze models as energy-based models (Clark et al. 2020): Electric, ELECTRA-TT, masked LM, TwoTower."""

from textebm.cloze.train import ClozeTrainConfig


def train(cfg: ClozeTrainConfig) -> None:
    """Train Electric (efficient NCE against a two-tower noise model), ELECTRA-TT, a masked LM or a TwoTower model."""
    from textebm.cloze.train import cloze_train

    m = cloze_train(cfg)
    ev = m.get("eval", {})
    print(f"{cfg.out}: " + ", ".join(f"{k}={v:.4f}" for k, v in ev.items() if isinstance(v, float)))


COMMANDS = {"train": (ClozeTrainConfig, train)}
