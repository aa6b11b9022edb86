"""Does torch.compile pay on CPU for the quickstart's noise-LM step? (issue 23)

    PYTHONPATH=src bash bench/quiet.sh python bench/bench_compile.py --data data/rt --precision bf16|fp32

The step of bench/bench_hot_paths.py (4 x 256 Llama infill LM, batch 32 of rt-polarity, the output
layer on the labelled rows only), eager against the decoder body under `torch.compile(dynamic=True)`
(the bucketed batches have 12 different lengths), same batches and weights, in one run: median
step time after two warm-up steps, the warm-up's seconds (compilation), and the largest
difference between the two paths' losses.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import torch
from bench_hot_paths import noise_lm_batches, train_step

from textebm.precision import cpu_capability, cpu_name
from textebm.train import make_optimizer, TrainOptions


def run(model, batches, dtype, compiled: bool) -> tuple[float, float, list[float]]:
    m = copy.deepcopy(model).train()
    opt = make_optimizer(m, TrainOptions(out="-", lr=1e-3))
    if compiled:
        m.model = torch.compile(m.model, dynamic=True)  # the body: lm_loss runs body and head apart
    times, losses, t0, warm = [], [], time.perf_counter(), 0.0
    for k, batch in enumerate([*batches[:2], *batches]):
        s = time.perf_counter()
        loss = train_step(m, opt, batch, dtype)
        if k == 1:
            warm = time.perf_counter() - t0
        if k >= 2:
            times.append(time.perf_counter() - s)
            losses.append(loss)
    return statistics.median(times), warm, losses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="the quickstart's rt-polarity dataset folder")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    model, batches = noise_lm_batches(a.data, a.steps)
    eager, eager_warm, el = run(model, batches, dtype, False)
    comp, comp_warm, cl = run(model, batches, dtype, True)
    print(f"{cpu_name()} ({cpu_capability()}), {torch.get_num_threads()} threads, {a.precision}: eager {eager:.3f} "
          f"s/step, compiled {comp:.3f} s/step ({eager / comp:.2f}x); warm-up {eager_warm:.1f} s eager, "
          f"{comp_warm:.1f} s compiled; max |loss difference| {max(abs(x - y) for x, y in zip(el, cl)):.1e}")


if __name__ == "__main__":
    main()
