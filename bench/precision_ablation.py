"""Where bf16's error comes from on a deep LM: round only some of the products to bf16 (issue 33).

    python bench/precision_ablation.py [--sentences 60] [--model smollm2-135m]
                                       [--out bench/results/performance/precision_ablation.json]

Simulated in fp32 (a layer's weight and/or input rounded to bf16, the product in fp32), so the
rounding alone is measured: mean and worst |log p − fp32 log p| over every token of the first
PTB test sentences, per variant. Reads runs/bench-data/ptb (bench_precision.py prepares it).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_precision import causal_scorer, ptb_sentences  # noqa: E402

from textebm.models.load import load_lm  # noqa: E402
from textebm.models.mixed import fp32_module_ids  # noqa: E402


def rounded(t: torch.Tensor) -> torch.Tensor:
    return t.bfloat16().float()


class Simulated(torch.nn.Linear):
    """A Linear whose weight and/or input are rounded to bf16 ("both", "w", "x"; "both_out" also
    rounds the output, as a bf16 product does)."""

    mode = "both"

    def forward(self, x):
        xi = rounded(x) if self.mode in ("both", "x", "both_out") else x
        w = self.w_rounded if self.mode in ("both", "w", "both_out") else self.weight
        y = F.linear(xi, w, self.bias)
        return rounded(y) if self.mode == "both_out" else y


def simulate(model, mode: str, skip=lambda name: False):
    m = copy.deepcopy(model)
    keep = fp32_module_ids(m)
    for name, mod in m.named_modules():
        if type(mod) is torch.nn.Linear and id(mod) not in keep and not skip(name):
            mod.__class__ = Simulated
            mod.w_rounded = rounded(mod.weight.data)
            mod.mode = mode
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=60)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--out", default="bench/results/performance/precision_ablation.json")
    args = ap.parse_args()
    texts = ptb_sentences(args.sentences, Path("runs/bench-data"))
    model, tok, meta = load_lm(args.model)
    score = causal_scorer(tok, meta)
    layers = model.config.num_hidden_layers
    variants = {
        "weights and inputs rounded, output rounded (a bf16 product)": ("both_out", None),
        "weights and inputs rounded, output fp32": ("both", None),
        "inputs only": ("x", None),
        "weights only": ("w", None),
        "both, attention q/k/v in fp32": ("both", lambda n: any(k in n for k in ("q_proj", "k_proj", "v_proj"))),
        "both, attention output in fp32": ("both", lambda n: "o_proj" in n),
        "both, MLP in fp32": ("both", lambda n: ".mlp." in n),
        "both, MLP down projection in fp32": ("both", lambda n: "down_proj" in n),
        "both, first 2 layers in fp32": ("both", lambda n: n.startswith(("model.layers.0.", "model.layers.1."))),
        "both, last 4 layers in fp32": ("both", lambda n: any(n.startswith(f"model.layers.{i}.")
                                                              for i in range(layers - 4, layers))),
    }
    out = {"model": args.model, "sentences": len(texts), "variants": {}}
    with torch.inference_mode():
        ref = score(model, texts)
        for name, (mode, skip) in variants.items():
            got = score(simulate(model, mode, skip or (lambda n: False)), texts)
            d = [abs(a - b) for sa, sb in zip(got, ref) for a, b in zip(sa, sb)]
            out["variants"][name] = {"mean_abs": sum(d) / len(d), "max_abs": max(d)}
            print(f"{name:60s} mean {sum(d) / len(d):.4f}  worst {max(d):.3f}")
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
