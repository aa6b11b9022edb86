"""Joint sampling (Algorithm 1) against sampling the same candidates with the base LM alone, and
the samples per second and memory peak of `residual ppl`'s log Z step (paper d, issue 22).

    PYTHONPATH=src python bench/generation/bench_joint.py --base WORK/base/news-s0 \
        --energy WORK/energy/news-unit WORK/energy/news-bit WORK/energy/news-bit-minilm \
        --data WORK/data/news --vocab WORK/vocab [--n 100 --prefixes 6 --repeats 3]

Part 1, per prefix: (a) n top-k candidates from the base LM; (b) Algorithm 1 = the same n
candidates (same seeds), their energies and the resampling draw. Both run side by side in one
process, interleaved a/b per repeat, and the overhead (b - a) / a is reported per energy, with the
energies and the resampling draw also timed alone on the same candidates (their share of the
sampling time: the steadier figure on a noisy machine); for UniT also without its prefix cache
(the full pass over every window), to show what the cache buys.
Part 2: `bounds.sample_energies` at n = 1,000 and 10,000 for one prefix, each in a fresh process:
samples per second and the process's peak resident memory (bounded: chunks, energies only).

Run it with nothing else on the machine: a job on the other core can double a step's time.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch


def _load(args):
    from textebm.detection.negative_sampling import windows_of
    from textebm.inference import inference_setup
    from textebm.models.load import load_energy, load_lm, load_tokenizer
    from textebm.residual.joint import BaseLM, JointEnergy

    device, choice = inference_setup(args.precision)
    energies = []
    for path in args.energy:
        model, spec, tok, vocab = load_energy(path, dtype=choice.dtype, device=device)
        energies.append((path, JointEnergy(model, spec, tok, vocab)))
    lm, tok, meta = load_lm(args.base, dtype=choice.dtype, device=device)
    vocab = load_tokenizer(args.vocab)
    base = BaseLM(lm, tok, meta, vocab)
    p = energies[0][1].spec.contexts[0]
    m = energies[0][1].spec.length - p
    wins = windows_of(args.data, "test", vocab, p + m, [p], stride=p + m, seed=0, max_windows=args.prefixes)
    return base, energies, [list(w.ids[:p]) for w in wins], m, choice


def part1(args) -> dict:
    from textebm.residual.generate import joint_sample
    from textebm.residual.resample import resample
    from textebm.seeds import derive_seed

    base, energies, prefixes, m, choice = _load(args)
    names = [str(p) for p, _ in energies]
    timings: dict[str, list[float]] = {"base": [], **{n: [] for n in names}, "unit-uncached": []}
    scoring: dict[str, list[float]] = {n: [] for n in names}
    scoring["unit-uncached"] = []

    def base_only(prefix, seed):
        ctx = base.context(prefix)
        return base.sample([ctx] * args.n, m, [derive_seed(seed, "candidate", i) for i in range(args.n)], 10, args.n)

    def score(en, prefix, cands, use_cache=True):  # the energies and the draw: what Algorithm 1 adds
        t = time.perf_counter()
        e = en.continuation_energies(prefix, cands, args.n, use_cache)
        resample(e, torch.Generator().manual_seed(0))
        return time.perf_counter() - t

    for prefix_i, prefix in enumerate(prefixes):
        seed = derive_seed(0, prefix_i)
        cands = [g.tokens for g in base_only(prefix, seed)]  # warm-up
        for _ in range(args.repeats):
            t = time.perf_counter()
            base_only(prefix, seed)
            timings["base"].append(time.perf_counter() - t)
            for name, (_, en) in zip(names, energies):
                t = time.perf_counter()
                joint_sample(base, en, prefix, m, args.n, 10, seed, args.n)
                timings[name].append(time.perf_counter() - t)
                scoring[name].append(score(en, prefix, cands))
                if en.cached:  # the same without the prefix cache: every window read in full
                    t = time.perf_counter()
                    joint_sample(base, en, prefix, m, args.n, 10, seed, args.n, use_cache=False)
                    timings["unit-uncached"].append(time.perf_counter() - t)
                    scoring["unit-uncached"].append(score(en, prefix, cands, use_cache=False))
    med = {k: statistics.median(v) for k, v in timings.items() if v}
    med_score = {k: statistics.median(v) for k, v in scoring.items() if v}
    return {"precision": choice.precision, "n": args.n, "prefixes": len(prefixes), "repeats": args.repeats,
            "seconds_per_prefix": med, "scoring_seconds_per_prefix": med_score,
            "overhead": {k: med[k] / med["base"] - 1 for k in med if k != "base"},
            "scoring_over_sampling": {k: v / med["base"] for k, v in med_score.items()}}


def part2_child(args) -> dict:
    from textebm.residual.bounds import sample_energies

    base, energies, prefixes, m, _choice = _load(args)
    en = energies[0][1]
    sample_energies(base, en, prefixes[0], m, 256, 1, args.chunk)  # warm-up
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    e = sample_energies(base, en, prefixes[0], m, args.samples, 0, args.chunk)
    dt = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"samples": args.samples, "chunk": args.chunk, "energy": args.energy[0], "seconds": dt,
            "samples_per_second": args.samples / dt, "peak_rss_mib": rss / 1024,
            "peak_rss_growth_mib": (rss - rss0) / 1024, "finite": bool(torch.isfinite(torch.tensor(e)).all())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--energy", nargs="+", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--prefixes", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--samples", type=int, default=0, help=argparse.SUPPRESS)  # part 2's child process
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.samples:
        print(json.dumps(part2_child(args)))
        return
    from textebm.precision import cpu_capability

    torch.set_flush_denormal(True)
    result = {"cpu": cpu_capability(), "threads": torch.get_num_threads(), "joint_sampling": part1(args)}
    js = result["joint_sampling"]
    print(f"CPU {result['cpu']}, {result['threads']} threads, {js['precision']}; n = {js['n']} candidates, "
          f"{js['prefixes']} prefixes x {js['repeats']} repeats (medians)")
    print(f"  base LM alone: {js['seconds_per_prefix']['base']:.3f} s per prefix")
    for k, v in js["overhead"].items():
        print(f"  joint, {k}: {js['seconds_per_prefix'][k]:.3f} s per prefix, {100 * v:+.1f} % on top; its energies "
              f"and draw alone {js['scoring_seconds_per_prefix'][k]:.3f} s = "
              f"{100 * js['scoring_over_sampling'][k]:.1f} % of the sampling")
    result["ppl_step"] = []
    for n in (1000, 10000):
        cmd = [sys.executable, __file__, "--base", args.base, "--energy", args.energy[0], "--data", args.data,
               "--vocab", args.vocab, "--samples", str(n), "--chunk", str(args.chunk), "--precision", args.precision,
               "--prefixes", "1"]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        result["ppl_step"].append(r)
        print(f"  ppl step, n = {n}: {r['samples_per_second']:.0f} samples/s, peak RSS {r['peak_rss_mib']:.0f} MiB "
              f"(+{r['peak_rss_growth_mib']:.0f} MiB while sampling)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
