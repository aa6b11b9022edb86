"""The hot paths' achieved FLOP/s as a fraction of the CPU's peak, and each fast path against its
plain version, side by side in one run (issue 23).

    PYTHONPATH=src python bench/bench_hot_paths.py --data data/rt [--steps 12] [--out FILE]

The peak is `textebm.precision.matmul_peak` (a 1024 x 1024 product at the threads used), measured
in this process for each precision. FLOPs are counted by torch's FlopCounterMode on the work the
fast path must do (the plain path does more of it); time per step is the median over the same
batches for both versions, after two warm-up steps. Paths:

  noise-lm   the quickstart's infill noise LM (paper a: 4 x 256 Llama, 8k BPE, mask ratio 0.4,
             batch 32 of rt-polarity sentences): forward, backward and fused AdamW. Plain: the
             output layer over every position (`HEAD_SPLIT_TYPES` emptied); fast: over the
             labelled positions only (`textebm.lm.scoring.labelled_logits`).

bf16 runs only where the CPU multiplies it natively (a CPU without it emulates bf16 at a fraction
of fp32's speed, and the quickstart never picks it there). The CPU and its flags are printed and
written with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from textebm.data.batching import BucketBatchSampler
from textebm.data.readers import load_split
from textebm.lm import scoring
from textebm.lm.train import LMBatcher, LMSpec, build_lm, lm_loss
from textebm.models.lm import special_ids
from textebm.precision import cpu_capability, cpu_flags, cpu_name, matmul_peak
from textebm.train import make_optimizer, TrainOptions


@contextlib.contextmanager
def plain_head(on: bool):
    """The plain path: the output layer over every position."""
    saved = scoring.HEAD_SPLIT_TYPES
    scoring.HEAD_SPLIT_TYPES = () if on else saved
    try:
        yield
    finally:
        scoring.HEAD_SPLIT_TYPES = saved


def noise_lm_batches(data: Path, n: int):
    texts = [r["text"] for r in load_split(data, "train")]
    model, tok, meta = build_lm(LMSpec(objective="infill", mask_ratio=0.4, vocab_size=8000, layers=4, width=256,
                                       heads=4, context=256), texts)
    limit = min(128, model.config.max_position_embeddings // 2 - 3)
    ids = [x[:limit] for x in tok(texts, add_special_tokens=False)["input_ids"] if x]
    batcher = LMBatcher(special_ids(tok, meta), "infill", "l2r", 0.4, seed=0)
    sampler = BucketBatchSampler([len(x) for x in ids], 32, seed=0)
    batches = [batcher([(i, ids[i]) for i in b]) for b in sampler.batches(0)[:n]]
    return model, batches


def train_step(model, opt, batch, dtype) -> float:
    """One noise-LM step (forward in `dtype` under autocast, backward, fused AdamW); its loss."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        nll, n = lm_loss(model, batch)
    (nll / n).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(nll.detach() / n)


def time_steps(model, batches, dtype, plain: bool) -> list[float]:
    model = copy.deepcopy(model).train()
    opt = make_optimizer(model, TrainOptions(out="-", lr=1e-3))
    times = []
    with plain_head(plain):
        for k, batch in enumerate([*batches[:2], *batches]):
            start = time.perf_counter()
            train_step(model, opt, batch, dtype)
            if k >= 2:
                times.append(time.perf_counter() - start)
    return times


def step_flops(model, batches) -> float:
    """Mean FLOPs of the fast path's forward and backward over `batches` (the optimizer's are a
    few per parameter and left out)."""
    total = 0.0
    for batch in batches:
        with FlopCounterMode(display=False) as c:
            nll, n = lm_loss(model, batch)
            (nll / n).backward()
        model.zero_grad(set_to_none=True)
        total += c.get_total_flops()
    return total / len(batches)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="the quickstart's rt-polarity dataset folder")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    args = ap.parse_args()
    torch.manual_seed(0)
    flags = cpu_flags()
    native_bf16 = bool({"avx512_bf16", "amx_bf16"} & flags)
    precisions = [torch.float32] + ([torch.bfloat16] if native_bf16 else [])
    threads = torch.get_num_threads()
    print(f"CPU: {cpu_name()} ({cpu_capability()}; native bf16: {native_bf16}), {threads} threads", flush=True)
    model, batches = noise_lm_batches(args.data, args.steps)
    flops = step_flops(copy.deepcopy(model), batches)
    tokens = statistics.mean(int(b["attention_mask"].sum()) for b in batches)
    rows = []
    for dtype in precisions:
        name = "bf16" if dtype == torch.bfloat16 else "fp32"
        peak = matmul_peak(dtype)
        plain = statistics.median(time_steps(model, batches, dtype, plain=True))
        fast = statistics.median(time_steps(model, batches, dtype, plain=False))
        row = {"path": "noise-lm", "precision": name, "peak_gflops": peak / 1e9, "gflop_per_step": flops / 1e9,
               "tokens_per_step": tokens, "plain_s": plain, "fast_s": fast, "speedup": plain / fast,
               "fast_gflops": flops / fast / 1e9, "fraction_of_peak": flops / fast / peak}
        rows.append(row)
        print(f"noise-lm {name}: plain {plain:.3f} s/step, fast {fast:.3f} s/step ({plain / fast:.2f}x); "
              f"{flops / 1e9:.1f} GFLOP/step, {flops / fast / 1e9:.0f} GFLOP/s = {flops / fast / peak:.0%} of the "
              f"{peak / 1e9:.0f} GFLOP/s {name} peak", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"cpu": cpu_name(), "capability": cpu_capability(), "native_bf16": native_bf16,
                                        "threads": threads, "torch": torch.__version__, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
