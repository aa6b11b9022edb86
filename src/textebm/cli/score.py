"""Score texts: Electric's one-pass pseudo-log-likelihood, ELECTRA, masked-LM PLL, two-tower or causal LM log-probabilities, per text, token and word."""

from textebm.scoring.score_command import ScoreTextsConfig


def score(cfg: ScoreTextsConfig) -> None:
    from textebm.scoring.score_command import score_command

    print(f"wrote {score_command(cfg)}")


COMMAND = (ScoreTextsConfig, score)
