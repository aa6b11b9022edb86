"""Benchmark: textebm's sampler and scorer against plain transformers, in one process.

    .venv/bin/python bench/bench_lm.py [--model smollm2-135m] [--data PTB_DIR] [--repeats 2]

Sampling: `textebm.lm.sample_command.generate` (our cached top-k sampler) vs `model.generate`
(do_sample, top_k 20, KV cache on) on the same left-padded batch of 32 prompts (the first half of
32 PTB test sentences), 32 new tokens each for both ([eos] is forbidden on both sides, so both do
exactly the same work: `min_new_tokens` for generate, a banned [eos] for ours).

Scoring: `textebm.lm.scoring.score_texts` (length-bucketed) vs a plain loop (same [bos] x [eos]
sequences, batch 16, dataset order, right padding, full log-softmax) and vs minicons'
IncrementalLMScorer (`sequence_score` with [bos] and [eos], sum of log-probabilities, batch 16;
installed into bench/.minicons when missing, `--no-minicons` skips it) over 300 PTB test sentences.

Both in fp32 and bf16 (weights loaded as bfloat16, as `--precision bf16` does). Each timing is
the best of `--repeats` runs after one untimed warm-up of the same call; the machine is shared,
so the best run is the least disturbed one. Peak memory is the rise of the process's peak RSS
during the phase (VmHWM, reset through /proc/self/clear_refs before each phase).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from peers import ensure_minicons, patch_tokenizer

from textebm.data.batching import left_pad, right_pad
from textebm.lm.generate import generate
from textebm.lm.scoring import score_texts
from textebm.models.lm import special_ids
from textebm.models.lm_format import causal_example
from textebm.models.load import load_lm
from textebm.precision import DTYPES, cpu_capability, cpu_flags


# ---------------------------------------------------------------- measuring


def _status_kb(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def measure(fn, warmup, repeats: int) -> tuple[float, float, object]:
    """(best seconds, peak RSS rise in MiB, last result) of `fn()` after an untimed `warmup()`."""
    warmup()  # a smaller call of the same code: allocator, thread pools, lazy imports
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base = _status_kb("VmRSS")
    best, result = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, (_status_kb("VmHWM") - base) / 1024, result


# ---------------------------------------------------------------- the two sides


def prompts(tokenizer, sp, texts: list[str], n: int) -> list[list[int]]:
    """[bos] + the first half of each of the first n texts with at least 8 tokens."""
    out = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        if len(ids) >= 8:
            out.append([sp.bos, *ids[:len(ids) // 2]])
        if len(out) == n:
            return out
    raise SystemExit(f"fewer than {n} test sentences with 8 tokens or more")


def ours_sample(model, sp, contexts, new_tokens: int, top_k: int, seed: int):
    gens = [torch.Generator().manual_seed(seed + b) for b in range(len(contexts))]
    return generate(model, contexts, [new_tokens] * len(contexts), gens, eos=-1, pad=sp.pad, top_k=top_k,
                    banned=[sp.eos])


@torch.inference_mode()
def hf_sample(model, sp, contexts, new_tokens: int, top_k: int, seed: int):
    ids, mask = left_pad(contexts, sp.pad)  # (B, P)
    torch.manual_seed(seed)
    return model.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_k=top_k, top_p=1.0,
                          temperature=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          use_cache=True, pad_token_id=sp.pad, eos_token_id=sp.eos)


@torch.inference_mode()
def plain_score(model, tokenizer, sp, texts: list[str], batch_size: int) -> list[list[float]]:
    """The loop one would write with transformers alone: dataset order, no bucketing."""
    seqs = [causal_example(ids, sp)[0] for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    out = []
    for s in range(0, len(seqs), batch_size):
        batch = seqs[s:s + batch_size]
        ids, mask = right_pad(batch, sp.pad)  # (B, T)
        logp = model(input_ids=ids, attention_mask=mask).logits.float().log_softmax(-1)  # (B, T, V)
        lp = logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
        out.extend(lp[b, :len(seq) - 1].tolist() for b, seq in enumerate(batch))
    return out


def minicons_scorer(model_id: str, dtype: torch.dtype):
    from minicons import scorer

    from textebm.models.load import find_model, CAUSAL_LM

    mc = scorer.IncrementalLMScorer(str(find_model(model_id, CAUSAL_LM).path), "cpu")
    patch_tokenizer(mc)
    mc.model = mc.model.to(dtype).eval()
    return mc


@torch.inference_mode()
def minicons_score(mc, texts: list[str], batch_size: int) -> list[float]:
    out = []
    for s in range(0, len(texts), batch_size):
        out += mc.sequence_score(texts[s:s + batch_size], reduction=lambda x: x.sum(0).item(), bos_token=True,
                                 eos_token=True)
    return out


# ---------------------------------------------------------------- main


def ptb_test(data: str | None) -> list[str]:
    if data is None:
        data = tempfile.mkdtemp(prefix="bench_ptb_") + "/ptb"
        subprocess.run([sys.executable, "-m", "textebm", "data", "prepare", "ptb", "--out", data], check=True)
    from textebm.data.readers import load_split

    return [row["text"] for row in load_split(data, "test")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="HF folder or models-fetch id")
    ap.add_argument("--data", default=None, help="PTB dataset dir (default: textebm data prepare ptb)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--score-texts", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--no-minicons", action="store_true", help="skip minicons' scorer")
    args = ap.parse_args()
    torch.set_flush_denormal(True)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, CPU {cpu_capability()}, "
          f"native bf16: {sorted({'avx512_bf16', 'amx_bf16'} & cpu_flags()) or 'no'}", flush=True)

    texts = ptb_test(args.data)
    score_set = texts[:args.score_texts]
    rows, results, scores = [], {}, {}

    def add(*row):
        rows.append(row)
        print("  measured {} {} {}: {:.1f} tokens/s".format(*row[:4]), flush=True)
    for precision in args.precisions:
        model, tokenizer, meta = load_lm(args.model, DTYPES[precision])
        sp = special_ids(tokenizer, meta)
        contexts = prompts(tokenizer, sp, texts, args.prompts)
        n_new = args.prompts * args.new_tokens

        t, mem, out = measure(lambda: ours_sample(model, sp, contexts, args.new_tokens, args.top_k, 0),
                              lambda: ours_sample(model, sp, contexts, 4, args.top_k, 1), args.repeats)
        assert all(len(g.tokens) == args.new_tokens for g in out)
        add("sample", "textebm", precision, n_new / t, t, mem)
        t, mem, out = measure(lambda: hf_sample(model, sp, contexts, args.new_tokens, args.top_k, 0),
                              lambda: hf_sample(model, sp, contexts, 4, args.top_k, 1), args.repeats)
        assert out.shape[1] - max(map(len, contexts)) == args.new_tokens
        add("sample", "generate", precision, n_new / t, t, mem)

        t, mem, ours = measure(lambda: score_texts(model, tokenizer, meta, score_set, args.batch_size),
                               lambda: score_texts(model, tokenizer, meta, texts[-32:], args.batch_size),
                               args.repeats)
        n_tok = sum(r.num_tokens for r in ours)
        add("score", "textebm", precision, n_tok / t, t, mem)
        t, mem, plain = measure(lambda: plain_score(model, tokenizer, sp, score_set, args.batch_size),
                                lambda: plain_score(model, tokenizer, sp, texts[-32:], args.batch_size),
                                args.repeats)
        add("score", "plain loop", precision, n_tok / t, t, mem)
        if not args.no_minicons and ensure_minicons():
            mc = minicons_scorer(args.model, DTYPES[precision])
            t, mem, _ = measure(lambda: minicons_score(mc, score_set, args.batch_size),
                                lambda: minicons_score(mc, texts[-32:], args.batch_size), args.repeats)
            add("score", "minicons", precision, n_tok / t, t, mem)
            del mc
        scores[precision] = (ours, plain)
        del model

    print(f"\nmodel {args.model}; sampling {args.prompts} x {args.new_tokens} tokens (top-k {args.top_k}); "
          f"scoring {len(score_set)} PTB test sentences ({n_tok} tokens incl. [eos]), batch {args.batch_size}")
    print(f"{'task':7} {'implementation':15} {'precision':9} {'tokens/s':>9} {'seconds':>8} {'peak MiB':>9}")
    for task, impl, prec, tps, t, mem in rows:
        print(f"{task:7} {impl:15} {prec:9} {tps:9.1f} {t:8.2f} {mem:9.0f}")
        results[f"{task}/{impl}/{prec}"] = {"tokens_per_s": tps, "seconds": t, "peak_rss_rise_mib": mem}

    speed = {k: v["tokens_per_s"] for k, v in results.items()}
    print("\nratios (tokens/s)")
    pairs = [("sample", "generate"), ("score", "plain loop")]
    pairs += [("score", "minicons")] if any(k.startswith("score/minicons/") for k in speed) else []
    for task, other in pairs:
        for prec in args.precisions:
            r = speed[f"{task}/textebm/{prec}"] / speed[f"{task}/{other}/{prec}"]
            results[f"ratio {task} textebm/{other} {prec}"] = r
            print(f"  {task:6} textebm {prec} / {other} {prec}: {r:5.2f}x")
        if "bf16" in args.precisions and "fp32" in args.precisions:
            r = speed[f"{task}/textebm/bf16"] / speed[f"{task}/{other}/fp32"]
            results[f"ratio {task} textebm bf16/{other} fp32"] = r
            print(f"  {task:6} textebm bf16 / {other} fp32: {r:5.2f}x")

    print("\nscores")
    for prec, (ours, plain) in scores.items():
        diff = [abs(a - b) for r, p in zip(ours, plain) for a, b in zip(r.token_logprobs, p)]
        results[f"score max |textebm - loop| per token {prec}"] = max(diff)
        print(f"  {prec}: textebm vs plain loop, max |diff| per token {max(diff):.2e} nats, "
              f"mean {sum(diff) / len(diff):.2e}")
    if "bf16" in scores and "fp32" in scores:
        dev = [abs(a - b) for r, p in zip(scores["bf16"][0], scores["fp32"][0])
               for a, b in zip(r.token_logprobs, p.token_logprobs)]
        nll = {p: -sum(r.logprob for r in scores[p][0]) / n_tok for p in scores}
        results["bf16 mean |per-token deviation| from fp32"] = sum(dev) / len(dev)
        print(f"  bf16 vs fp32 (textebm): mean |deviation| per token {sum(dev) / len(dev):.4f} nats, "
              f"max {max(dev):.3f}; NLL/token fp32 {nll['fp32']:.4f}, bf16 {nll['bf16']:.4f}")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f} (other processes share these cores)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
