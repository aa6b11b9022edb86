"""The main job: calibration comparison (He et al. 2021) on rt-polarity with MiniLM, end to end."""

from textebm.classify.quickstart import QuickstartConfig


def run(cfg: QuickstartConfig) -> None:
    from textebm.classify.quickstart import quickstart

    quickstart(cfg)


COMMAND = (QuickstartConfig, run)
