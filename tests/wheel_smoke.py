"""Smoke test of an installed textebm wheel (not the source tree): load every kind of folder and
call it once. tests/test_api.py builds the wheel, installs it with `pip install --target SITE`
and runs

    PYTHONPATH=SITE python tests/wheel_smoke.py SITE RUNS OUT.json

then compares OUT.json with `numbers(RUNS)` computed in-process from the source tree.

RUNS holds tiny folders of every kind under the names docs/api.md uses (the `runs` fixture of
tests/test_api.py): runs/electric, runs/mlm, runs/ptb-lm (Scorer), runs/ebm (Classifier), runs/pos,
runs/ner (Tagger), runs/det, runs/loglik (Detector), runs/unit over runs/base (JointModel),
runs/noise-lm (InfillLM).
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

TEXTS = ["w1 w7 w2", "the nation shall build roads", "w5"]
SENTENCES = [["The", "dog", "sees", "a", "cat", "."], "A cat hears the dog"]
PREFIX = "the nation shall build roads and schools for every citizen while congress votes"


def numbers(runs: Path) -> dict:
    """{folder: what its class gives on TEXTS (or SENTENCES)}, every model in fp32 on the CPU."""
    import textebm

    r = Path(runs) / "runs"
    out: dict = {}
    for name in ("electric", "mlm", "ptb-lm"):
        out[name] = [s.score for s in textebm.load(r / name, device="cpu", precision="fp32").score(TEXTS)]
    out["ebm"] = textebm.load(r / "ebm", device="cpu", precision="fp32").predict_proba(TEXTS).tolist()
    for name in ("pos", "ner"):
        out[name] = [t.tags for t in textebm.load(r / name, device="cpu").tag(SENTENCES)]
    for name in ("det", "loglik"):
        out[name] = textebm.load(r / name, device="cpu", precision="fp32").predict_proba(TEXTS).tolist()
    joint = textebm.JointModel(r / "unit", base=r / "base", device="cpu")
    out["unit"] = [g.energy_joint for g in joint.generate([PREFIX], n=3, top_k=5)]
    out["noise-lm"] = [s.logprob for s in textebm.load(r / "noise-lm", device="cpu", precision="fp32").sample(TEXTS)]
    return out


def check_installed(site: Path) -> None:
    """textebm comes from `site` (the wheel), with its metadata and its `textebm` command."""
    import textebm

    where = Path(textebm.__file__).resolve()
    if site.resolve() not in where.parents:
        raise SystemExit(f"textebm imported from {where}, not from the installed wheel in {site}")
    dist = metadata.distribution("textebm")
    if site.resolve() not in Path(dist.locate_file("textebm/__init__.py")).resolve().parents:
        raise SystemExit(f"textebm's metadata read from {dist.locate_file('')}, not from {site}")
    if dist.version != textebm.__version__ or not any(r.startswith("torch") for r in dist.requires or []):
        raise SystemExit(f"wheel metadata: version {dist.version}, requires {dist.requires}")
    script = next((e for e in dist.entry_points if e.group == "console_scripts" and e.name == "textebm"), None)
    if script is None or script.value != "textebm.cli:main":
        raise SystemExit(f"wheel metadata: console script textebm is {script}")
    run = subprocess.run([sys.executable, str(site / "bin" / "textebm"), "--help"], capture_output=True, text=True)
    if run.returncode != 0 or "classify" not in run.stdout:
        raise SystemExit(f"installed `textebm --help` failed ({run.returncode}): {run.stderr[-2000:]}")


def main(argv: list[str]) -> None:
    site, runs, out = (Path(a) for a in argv)
    check_installed(site)
    out.write_text(json.dumps(numbers(runs)), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
