"""Per-step costs of the quickstart's pieces in fp32 and bf16, measured side by side in one run.

    python bench/bench_quickstart_steps.py --quickstart runs/quickstart [--steps 12]

Needs a finished quickstart folder (its data, noise LM and noise). Times, in each precision:
a noise-LM training step (batch 32), one infill sample, a classifier step (baseline, and joint
EBM with K=1; batch 32, MiniLM) and one predicted example (evaluation). Prints seconds per unit,
the bf16/fp32 ratio, the CPU's capability and flags, and what `--precision auto` picks here.
The quickstart's start-of-run estimate (`STEP_SECONDS` in textebm/classify/quickstart.py) comes from
these figures.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch


def _train_step_seconds(metrics: dict) -> float:
    t = metrics["train"]
    return t["wall_seconds"] / max(1, t["steps"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quickstart", default="runs/quickstart")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--samples", type=int, default=512)
    args = ap.parse_args()
    torch.set_flush_denormal(True)

    from textebm.classify.data import encode_examples
    from textebm.classify.predict import predict
    from textebm.classify.train import ClassifyTrainConfig, classify_train
    from textebm.data.readers import load_split
    from textebm.lm.sample_command import SampleConfig, sample_file
    from textebm.lm.train import LMTrainConfig, lm_train
    from textebm.models.load import load_classifier
    from textebm.precision import cpu_capability, cpu_flags, resolve_precision

    qs = Path(args.quickstart)
    seed = qs / "seed-0" if (qs / "seed-0").is_dir() else qs  # the layout since --seeds
    data, noise = qs / "data", seed / "noise.jsonl"
    lm = seed / "noise-lm" / "model"
    if not (noise.is_file() and lm.is_dir()):
        raise SystemExit(f"{qs}: not a finished quickstart folder (run `make quickstart` first)")
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for prec in ("fp32", "bf16"):
            r = rows.setdefault(prec, {})
            m = lm_train(LMTrainConfig(out=str(tmp / f"lm-{prec}"), data=str(data), objective="infill",
                                       max_steps=args.steps, batch_size=32, precision=prec, progress=False,
                                       eval_split=""))
            r["noise-LM step"] = _train_step_seconds(m)
            t = time.perf_counter()
            sample_file(SampleConfig(model=str(lm), data=str(data), out=str(tmp / f"s-{prec}.jsonl"), mode="infill",
                                     limit=args.samples, precision=prec, progress=False))
            r["infill sample"] = (time.perf_counter() - t) / args.samples
            n_noise = len({json.loads(line)["source_id"] for line in noise.open()})
            common = dict(data=str(data), limit=n_noise, max_steps=args.steps, batch_size=32, precision=prec,
                          progress=False, eval_split="")
            m = classify_train(ClassifyTrainConfig(out=str(tmp / f"b-{prec}"), **common))
            r["classifier step (baseline)"] = _train_step_seconds(m)
            m = classify_train(ClassifyTrainConfig(out=str(tmp / f"e-{prec}"), energy="hidden", noise=str(noise),
                                                   **common))
            r["classifier step (joint EBM, K=1)"] = _train_step_seconds(m)
            model, tok = load_classifier(tmp / f"b-{prec}", dtype=torch.float32 if prec == "fp32" else torch.bfloat16)
            ex = encode_examples(tok, load_split(data, "dev"), model.spec.labels, model.spec.max_len)
            t = time.perf_counter()
            predict(model, ex, tok.pad_token_id or 0, 64)
            r["predicted example"] = (time.perf_counter() - t) / len(ex)
    flags = sorted({"avx2", "avx512f", "avx512_bf16", "amx_bf16"} & cpu_flags())
    print(f"CPU: torch capability {cpu_capability()}, flags {', '.join(flags)}; threads {torch.get_num_threads()}")
    print(f"--precision auto here: {resolve_precision('auto', 'cpu').reason}")
    print(f"{'seconds per unit':36s} {'fp32':>10s} {'bf16':>10s} {'bf16/fp32':>10s}")
    for k in rows["fp32"]:
        a, b = rows["fp32"][k], rows["bf16"][k]
        print(f"{k:36s} {a:10.4f} {b:10.4f} {b / a:10.2f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
