"""Real-vs-generated detection speed side by side in one run (issue 11, "Speed"):

1. negatives generation: textebm's KV-cache sampler against transformers' `generate` on the same
   generator, prompts and settings (top-k 10, exactly L − c new tokens), batched, for suffix
   completion (an l2r generator) and prefix completion (an r2l one);
2. windows/s of training (forward + backward, B windows with k negatives) and of scoring each
   energy type at the sizes of bench/detection/cpu.json;
3. windows/s of the zero-shot detectors with SmolLM2-135M (loglik, Fast-DetectGPT; Binoculars
   with SmolLM2 as both observer and performer: the registry offers one size) on 64-token windows;
4. the per-unit rates the matrix's --plan uses, and the estimate of bench/detection/cpu.json from them.

    python bench/bench_detection.py --gen runs/res/gen --vocab runs/res/vocab --data runs/res/data/sotu \
        [--windows 64] [--threads 2] [--out bench/results/detection]

Every figure is printed with the CPU capability and the precision it ran in.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def _time(fn, repeat: int = 1) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def cpu_label() -> str:
    from textebm.precision import cpu_capability, cpu_flags

    flags = sorted(cpu_flags() & {"avx512_bf16", "amx_bf16"})
    return cpu_capability() + (f" + {', '.join(flags)}" if flags else " (no native bf16)")


def windows(args, vocab, n: int):
    from textebm.data.readers import load_split
    from textebm.data.streams import doc_streams
    from textebm.detection.windows import make_windows

    return make_windows(doc_streams(load_split(args.data, "dev"), vocab), "bench", "dev", 64, 64, [48, 56], 0, n)


def bench_sampler(args, vocab) -> dict:
    from textebm.lm.generate import generate
    from textebm.lm.sample_command import banned_ids
    from textebm.models.lm import special_ids
    from textebm.models.load import load_lm
    from textebm.detection.windows import context_ids

    out = {}
    wins = windows(args, vocab, args.windows)
    for direction, mode in (("l2r", "suffix completion"), ("r2l", "prefix completion")):
        model, tok, meta = load_lm(Path(args.gen) / f"sotu-tf-{direction}-s0")
        sp = special_ids(tok, meta)
        # one context length for the batch (transformers' generate has no per-row budgets)
        ctx = [[sp.bos, *(c if direction == "l2r" else c[::-1])] for c in
               (context_ids(w, direction)[:48] if direction == "l2r" else context_ids(w, direction)[-48:] for w in wins)]
        n_new = 16
        banned = sorted(set(banned_ids(sp)) | {sp.eos})

        def ours():
            generate(model, ctx, [n_new] * len(ctx), [torch.Generator().manual_seed(i) for i in range(len(ctx))],
                     sp.eos, sp.pad, 10, 1.0, banned)

        ids = torch.tensor(ctx)  # equal lengths: no padding needed
        bad = [[t] for t in banned]

        def theirs():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=10, top_p=1.0,
                           temperature=1.0, max_new_tokens=n_new, min_new_tokens=n_new, pad_token_id=sp.pad,
                           bad_words_ids=bad)

        a, b = _time(ours), _time(theirs)
        out[mode] = {"windows": len(ctx), "new_tokens": n_new, "textebm_s": a, "transformers_s": b,
                     "textebm_windows_per_s": len(ctx) / a, "speedup": b / a}
    return out


def bench_energies(args, vocab) -> dict:
    from textebm.detection.train import EnergyBuildSpec, WindowBatcher, build_energy_model, residual_step

    cfg = json.loads(Path(args.config).read_text())["energies"]
    wins = windows(args, vocab, 64)
    rows = [{"positive": list(w.ids), "negatives": [list(w.ids)] * 3} for w in wins]
    out = {}
    for name, spec in cfg.items():
        opts = {k: spec[k] for k in ("layers", "width", "heads") if k in spec}
        init = spec.get("init", "")
        if init == "generator":
            init = str(Path(args.gen) / "sotu-tf-l2r-s0")
        c = EnergyBuildSpec(energy=spec["energy"], init=init, **opts)
        model, es, tok = build_energy_model(c, vocab, 64)
        batcher = WindowBatcher(es, tok, vocab)
        bs = spec.get("batch_size", 16)
        batch = batcher(list(enumerate(rows[:bs])))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.train_bf16):
                loss, _ = residual_step(model, batch, "bce", "worst", 1.0)
            loss.backward()
            opt.step()
            opt.zero_grad()

        score_batch = batcher(rows)

        @torch.no_grad()
        def score():
            model(score_batch["input_ids"], score_batch["attention_mask"])

        model.train()
        t_step = _time(step, 2)
        model.eval()
        t_score = _time(score, 2)
        out[name] = {"train_windows_per_s": bs * 4 / t_step, "train_step_s": t_step, "batch_windows": bs,
                     "score_windows_per_s": len(rows) * 4 / t_score,
                     "parameters": sum(p.numel() for p in model.parameters())}
    return out


def bench_zeroshot(args, vocab) -> dict:
    from textebm.detection.detect import ZeroShotScorer

    wins = [list(w.ids) for w in windows(args, vocab, 32)]
    out = {}
    for method in ("loglik", "fastdetectgpt", "binoculars"):
        scorer = ZeroShotScorer(method, "smollm2-135m", vocab, "smollm2-135m" if method == "binoculars" else None)
        t = _time(lambda: scorer.score_ids(wins, 16))
        out[method] = {"windows_per_s": len(wins) / t, "model": "SmolLM2-135M (fp32)"}
    return out


def rates(res: dict) -> dict:
    """Seconds per unit for `textebm.detection.report.plan_report`, from this run's measurements."""
    from textebm.detection.report import DEFAULT_RATES

    cfg_energy = {name: r["batch_windows"] * 4 / r["train_windows_per_s"] for name, r in res["energies"].items()}
    steps = {"linear": cfg_energy.get("linear"), "bilstm": cfg_energy.get("bilstm"),
             "unitransf": cfg_energy.get("unitransf"), "bitransf": cfg_energy.get("bitransf"),
             "bitransf-init": cfg_energy.get("bitransf-minilm")}
    sampler = min(r["textebm_windows_per_s"] for r in res["sampler"].values())
    return {**DEFAULT_RATES, "energy_step": {k: v for k, v in steps.items() if v is not None},
            "negative_window": 3 / sampler,  # k = 3 negatives per window
            "eval_window": {**DEFAULT_RATES["eval_window"],
                            **{("bitransf-init" if k == "bitransf-minilm" else k): 1 / r["score_windows_per_s"]
                               for k, r in res["energies"].items()}}}


def estimate(config: str, rates_: dict) -> str:
    import tempfile

    from textebm.detection.matrix import Matrix, plan_cells, read_config
    from textebm.detection.report import plan_report

    cfg = read_config(config)
    cfg["rates"] = rates_
    with tempfile.TemporaryDirectory() as empty:
        m = Matrix(cfg, Path(empty))
        cells = plan_cells(cfg)
        return plan_report(m, cells, cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gen", default="runs/res/gen")
    ap.add_argument("--vocab", default="runs/res/vocab")
    ap.add_argument("--data", default="runs/res/data/sotu")
    ap.add_argument("--config", default=str(Path(__file__).parent / "residual" / "cpu.json"))
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--train-bf16", action=argparse.BooleanOptionalAction, default=True,
                    help="train steps under bf16 autocast (as `auto` picks on a CPU with native bf16)")
    ap.add_argument("--out", default="bench/results/detection")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from textebm.models.load import load_tokenizer

    vocab = load_tokenizer(args.vocab, "--vocab")
    res = {"cpu": cpu_label(), "threads": args.threads,
           "precision": {"sampling": "fp32", "scoring": "fp32", "training": "bf16 autocast" if args.train_bf16 else "fp32"}}
    res["sampler"] = bench_sampler(args, vocab)
    res["energies"] = bench_energies(args, vocab)
    res["zeroshot"] = bench_zeroshot(args, vocab)
    res["rates"] = rates(res)
    res["estimate"] = estimate(args.config, res["rates"])
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bench_detection.json").write_text(json.dumps(res, indent=2) + "\n")
    print(f"CPU {res['cpu']}, {args.threads} threads; sampling and scoring fp32, training {res['precision']['training']}")
    for mode, r in res["sampler"].items():
        print(f"  negatives, {mode}: textebm {r['textebm_windows_per_s']:.1f} windows/s, "
              f"{r['speedup']:.2f}x transformers' generate ({r['windows']} windows x {r['new_tokens']} tokens)")
    for name, r in res["energies"].items():
        print(f"  energy {name:16s} train {r['train_windows_per_s']:8.1f} windows/s   "
              f"score {r['score_windows_per_s']:8.1f} windows/s   ({r['parameters'] / 1e6:.2f}M parameters)")
    for m, r in res["zeroshot"].items():
        print(f"  zero-shot {m:14s} {r['windows_per_s']:6.1f} windows/s (SmolLM2-135M, 64-token windows)")
    print(f"rates for the matrix's --plan (seconds per unit): {json.dumps(res['rates'])}")
    print(f"estimate of {args.config} from scratch with these rates:\n{res['estimate']}")


if __name__ == "__main__":
    main()
