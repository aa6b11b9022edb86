"""residual: residual EBMs for generation (Deng et al. 2020), the joint model P_LM(x) exp(-E(x)).

  textebm residual generate --base LM --energy RUN --data DIR --split test --n 100 --top-k 10 --out GEN
  textebm residual ppl --base LM --energy RUN [RUN ...] --data DIR --split test --samples 1000 --out PPL
  textebm residual repetitions --base LM --energy RUN --data DIR --candidates 10 --completions 100 --out REP

The energy E is a run of `textebm detect train` (conditional NCE against the base LM's samples).
Paper c's detector commands (`residual train / fit / eval / score / threshold / analyze / matrix`)
moved to `textebm detect`; the old names still run, for this release, and say where they went.
"""

import functools
import logging

from textebm.cli import detect
from textebm.residual.commands import ResidualGenerateConfig, ResidualPPLConfig, ResidualRepetitionsConfig

log = logging.getLogger(__name__)


def generate(cfg: ResidualGenerateConfig) -> None:
    """Top-k joint sampling (Algorithm 1): n base-LM candidates per prefix, one resampled by exp(-E)."""
    from textebm.residual.commands import residual_generate

    m = residual_generate(cfg)
    g = m["groups"]
    div = ("; unique 4-grams " + ", ".join(f"{k} {v['unique_4gram']:.3f}" for k, v in g.items())
           if g["joint"]["unique_4gram"] is not None else "")
    print(f"{cfg.out}: {m['prefixes']} prefixes, ESS mean {m['ess_mean']:.1f} of {m['n']}{div}; report in "
          f"{cfg.out}/report.md")


def ppl(cfg: ResidualPPLConfig) -> None:
    """Perplexity bounds of the joint model (T_n / U_n), the base LM's and others' on the same tokens."""
    from textebm.residual.commands import residual_ppl
    from textebm.residual.report import run_name

    m = residual_ppl(cfg)
    parts = [f"base LM {m['base_ppl']:.2f}"] + [f"{run_name(c['model'])} {c['ppl']:.2f}" for c in m["compare"]]
    parts += [f"joint {x['kind']} ({run_name(x['energy'])}) {x['joint_ppl_lower']:.2f}-{x['joint_ppl_upper']:.2f}"
              for x in m["models"]]
    print(f"{cfg.out}: perplexity over {m['tokens']} tokens: " + "; ".join(parts))


def repetitions(cfg: ResidualRepetitionsConfig) -> None:
    """Table 3: P(x_t | x_<t) of the base LM and the joint model where a continuation repeats a token."""
    from textebm.residual.commands import residual_repetitions

    s = residual_repetitions(cfg)["summary"]
    ci = "" if s["lo"] is None else f" [{s['lo']:+.3f}, {s['hi']:+.3f}]"
    print(f"{cfg.out}: the joint model lowers the repeated token's probability in {s['lowered']} of {s['examples']} "
          f"examples; mean log-ratio {s['mean_log_ratio']:+.3f}{ci}; report in {cfg.out}/report.md")


def _moved(name: str, fn):
    """`textebm residual NAME`, kept for one release: says where the command went, then runs it."""

    @functools.wraps(fn)
    def run(cfg) -> None:
        log.warning("`textebm residual %s` moved to `textebm detect %s`; the old name goes in the next release",
                    name, name)
        fn(cfg)

    run.__doc__ = f"moved to `textebm detect {name}` (this name still runs, for this release)"
    return run


COMMANDS: dict = {
    "generate": (ResidualGenerateConfig, generate),
    "ppl": (ResidualPPLConfig, ppl),
    "repetitions": (ResidualRepetitionsConfig, repetitions),
    **{name: (cls, _moved(name, fn)) for name, (cls, fn) in detect.COMMANDS.items()},
}
