"""How sure is zeta's starting estimate of log Z_l? Its spread over seeds, by draws (issue 34).

    python bench/tagging/zeta_spread.py RUN [--draws 8 64 512] [--seeds 5] [--proposal uniform noise]
                                        [--out bench/results/tagging/zeta_spread.json]

RUN is a `tag train --method pretrain` run: its stage 1 (RUN/pretrain/model: the tagger and
trf.safetensors) is the TRF of eq. (3) after DNCE. For each number of uniform sentences per length,
`estimate_zeta` runs with several seeds, on the trained TRF and on the same network freshly
initialised (what `start_zeta` sees at the start of stage 1), with sentences drawn uniformly and
(`noise`) from stage 1's trained noise LM, q(x | l), on the trained TRF; reported per draws: the standard
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

from textebm.models.noise_lm import NoiseLM
from textebm.models.trf import TRFHead
from textebm.tagging.folder import load_tagging_model
from textebm.tagging.ssl import estimate_zeta


def trf_of(stage1: Path, tagger) -> TRFHead:
    state = {k.removeprefix("trf."): v for k, v in load_file(str(stage1 / "trf.safetensors")).items()
             if k.startswith("trf.")}
    head = TRFHead(tagger.spec.vocab_size, tagger.spec.hidden, state["log_pi"].exp().double())
    head.load_state_dict(state)
    return head.eval()


def noise_of(stage1: Path, pi: torch.Tensor) -> NoiseLM:
    """Stage 1's noise LM, its sizes read from its weights."""
    state = {k.removeprefix("noise."): v for k, v in load_file(str(stage1 / "trf.safetensors")).items()
             if k.startswith("noise.")}
    vocab, embed = state["embed.weight"].shape
    noise = NoiseLM(vocab, pi, embed=embed, hidden=state["lstm.weight_hh_l0"].shape[1])
    noise.load_state_dict(state)
    return noise.eval()


def spread(tagger, head: TRFHead, draws: int, seeds: int, learned: bool = True, proposal=None) -> dict:
    pi = head.log_pi.exp()
    est = []
    with torch.no_grad():
        for seed in range(seeds):
            g = torch.Generator().manual_seed(seed)
            est.append(estimate_zeta(lambda ids, m: head.potential(tagger, ids, m), pi, tagger.spec.vocab_size,
                                     tagger.spec.pad_id, n=draws, generator=g, proposal=proposal).double())
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
    ap.add_argument("--proposal", nargs="+", default=["uniform"], choices=["uniform", "noise"])
    ap.add_argument("--out", default="bench/results/tagging/zeta_spread.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    stage1 = Path(args.run) / "pretrain" / "model"
    tagger, vocab, _ = load_tagging_model(stage1)
    trained = trf_of(stage1, tagger)
    fresh_tagger = type(tagger)(tagger.spec).eval()
    fresh = TRFHead(tagger.spec.vocab_size, tagger.spec.hidden, trained.log_pi.exp().double()).eval()
    metrics = json.loads((Path(args.run) / "pretrain" / "metrics.json").read_text())["train"]
    out = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {}
    if out.get("run") not in (None, str(args.run)):
        out = {}  # another run's figures are not mixed with these
    out.update({"run": str(args.run), "vocab": len(vocab), "max_length": trained.max_len, "dnce_steps": metrics["steps"]})
    noise = noise_of(stage1, trained.log_pi.exp().double()) if "noise" in args.proposal else None
    for key in (["trained", "fresh"] if "uniform" in args.proposal else []) + (
            ["trained_noise_proposal"] if noise is not None else []):
        out[key] = []
    for n in args.draws:
        if "uniform" in args.proposal:
            out["trained"].append(spread(tagger, trained, n, args.seeds))
            out["fresh"].append(spread(fresh_tagger, fresh, n, args.seeds, learned=False))
        if noise is not None:
            out["trained_noise_proposal"].append(spread(tagger, trained, n, args.seeds, proposal=noise))
        print(json.dumps({"draws": n, **{k: v[-1] for k, v in out.items() if isinstance(v, list) and v}}),
              file=sys.stderr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
