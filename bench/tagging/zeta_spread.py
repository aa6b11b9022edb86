"""How sure is zeta's starting estimate of log Z_l? Its spread over seeds, by draws (issue 34).

    python bench/tagging/zeta_spread.py RUN [--draws 8 64 512] [--seeds 5]
                                        [--out bench/results/tagging/zeta_spread.json]

RUN is a `tag train --method pretrain` run: its stage 1 (RUN/pretrain/model: the tagger and
trf.safetensors) is the TRF of eq. (3) after DNCE. For each number of uniform sentences per length,
`estimate_zeta` runs with several seeds, on the trained TRF and on the same network freshly
initialised (what `start_zeta` sees at the start of stage 1); reported per draws: the standard
deviation over seeds of each ζ_l, averaged over the lengths π gives weight (π-weighted), its
largest over lengths, and the π-weighted gap between the estimate's mean and the ζ that DNCE
learned. Adam moves ζ_l by about the learning rate a step, so a spread well under lr x steps is
within what training corrects; a spread under lr is corrected in one step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from textebm.models.trf import TRFHead
from textebm.tagging.folder import load_tagging_model
from textebm.tagging.ssl import estimate_zeta


def trf_of(stage1: Path, tagger) -> TRFHead:
    state = {k.removeprefix("trf."): v for k, v in load_file(str(stage1 / "trf.safetensors")).items()
             if k.startswith("trf.")}
    head = TRFHead(tagger.spec.vocab_size, tagger.spec.hidden, state["log_pi"].exp().double())
    head.load_state_dict(state)
    return head.eval()


def spread(tagger, head: TRFHead, draws: int, seeds: int, learned: bool = True) -> dict:
    pi = head.log_pi.exp()
    est = []
    with torch.no_grad():
        for seed in range(seeds):
            g = torch.Generator().manual_seed(seed)
            est.append(estimate_zeta(lambda ids, m: head.potential(tagger, ids, m), pi, tagger.spec.vocab_size,
                                     tagger.spec.pad_id, n=draws, generator=g).double())
    est = torch.stack(est)  # (seeds, L + 1)
    sd = est.std(0)  # (L + 1,)
    w = pi.double() / pi.sum()
    out = {"draws": draws, "seeds": seeds, "sd_pi_weighted": float((w * sd).sum()), "sd_max": float(sd.max())}
    if learned:  # how far DNCE moved ζ from where the estimate would start it
        out["gap_to_learned_pi_weighted"] = float((w * (est.mean(0) - head.zeta.detach().double()).abs()).sum())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--draws", type=int, nargs="+", default=[8, 64, 512])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default="bench/results/tagging/zeta_spread.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    stage1 = Path(args.run) / "pretrain" / "model"
    tagger, vocab, _ = load_tagging_model(stage1)
    trained = trf_of(stage1, tagger)
    fresh_tagger = type(tagger)(tagger.spec).eval()
    fresh = TRFHead(tagger.spec.vocab_size, tagger.spec.hidden, trained.log_pi.exp().double()).eval()
    metrics = json.loads((Path(args.run) / "pretrain" / "metrics.json").read_text())["train"]
    out = {"run": str(args.run), "vocab": len(vocab), "max_length": trained.max_len,
           "dnce_steps": metrics["steps"], "trained": [], "fresh": []}
    for n in args.draws:
        out["trained"].append(spread(tagger, trained, n, args.seeds))
        out["fresh"].append(spread(fresh_tagger, fresh, n, args.seeds, learned=False))
        print(json.dumps({"draws": n, "trained": out["trained"][-1], "fresh": out["fresh"][-1]}), file=sys.stderr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
