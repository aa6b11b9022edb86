"""Scoring speed side by side in one run: Electric's one pass against masked-LM PLL (textebm's,
sub-batched, and minicons' MaskedLMScorer on the same masked LM), two-tower and causal scoring,
all at MiniLM size, on the same PTB test sentences (issue 10, item 6).

    python bench/bench_scoring.py [--sentences 240] [--precision fp32] [--batch-size 8]
                                  [--electric RUN --mlm RUN --twotower RUN] [--out runs/bench-scoring]

Without trained models the bench builds them from `minilm-l6` (heads and towers untrained):
speed does not depend on the weights. Reported per method: sentences/s, FLOPs counted by torch's
FLOP counter on the same sentences, achieved FLOP/s against this CPU's measured matrix-multiply
peak in the precision used (a 1024 x 1024 product), and the one-pass speedup over masked-LM PLL
against the mean tokens per sentence (its limit: PLL runs one copy per token). Then the peak
memory (resident set growth, in a fresh process each) of masked-LM PLL on a 40-token and a
400-token text, textebm's and minicons'. minicons is installed into bench/.minicons (its own
folder, `pip install --target`, never into textebm's environment) when missing; --no-minicons skips
it. Results go to OUT/bench_scoring.json and are printed with the CPU capability and precision.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from peers import MINICONS, ensure_minicons, patch_tokenizer

from textebm.precision import matmul_peak

HERE = Path(__file__).resolve().parent


def ptb_sentences(n: int, root: Path) -> list[str]:
    data = root / "ptb"
    if not (data / "test.jsonl").is_file():
        subprocess.run([sys.executable, "-m", "textebm", "data", "prepare", "ptb", "--out", str(data)], check=True)
    texts = [json.loads(line)["text"] for line in (data / "test.jsonl").read_text().splitlines()]
    return [t for t in texts if t.strip()][:n]


def build_models(args):
    """MiniLM-sized Electric, masked LM, TwoTower (towers 2/3 of it) and a causal Llama of the
    encoder's shape, from the given runs or built from minilm-l6."""
    from textebm.cloze.train import ClozeBuildSpec, build_cloze
    from textebm.models.load import load_cloze

    models = {}
    for objective in ("electric", "mlm", "twotower"):
        run = getattr(args, objective)
        if run:
            models[objective] = load_cloze(run)
        else:
            cfg = ClozeBuildSpec(objective=objective, init="minilm-l6")
            m, tok = build_cloze(cfg, [])
            models[objective] = (m.eval(), tok)
    enc = models["electric"][0].encoder.config
    from transformers import LlamaConfig, LlamaForCausalLM

    causal = LlamaForCausalLM(LlamaConfig(
        vocab_size=enc.vocab_size, hidden_size=enc.hidden_size, intermediate_size=enc.intermediate_size,
        num_hidden_layers=enc.num_hidden_layers, num_attention_heads=enc.num_attention_heads,
        num_key_value_heads=enc.num_attention_heads, max_position_embeddings=512, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=None, pad_token_id=0)).eval()
    return models, causal


def export_masked_lm(model, tokenizer, folder: Path) -> Path:
    """The textebm masked LM as a transformers BertForMaskedLM folder (for minicons)."""
    from transformers import BertForMaskedLM

    hf = BertForMaskedLM(model.encoder.config)
    sd = {f"bert.{k}": v for k, v in model.encoder.state_dict().items()}
    sd.update({"cls.predictions.transform.dense.weight": model.mlm_head.dense.weight,
               "cls.predictions.transform.dense.bias": model.mlm_head.dense.bias,
               "cls.predictions.transform.LayerNorm.weight": model.mlm_head.norm.weight,
               "cls.predictions.transform.LayerNorm.bias": model.mlm_head.norm.bias,
               "cls.predictions.bias": model.mlm_head.bias,
               "cls.predictions.decoder.bias": model.mlm_head.bias})
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k not in ("cls.predictions.decoder.weight",) and "pooler" not in k]
    assert not missing and not unexpected, (missing, unexpected)
    hf.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def timed(fn, flops_fn=None) -> tuple[float, float]:
    """(seconds, FLOPs) of fn(); FLOPs counted in a separate, untimed run."""
    flops = 0.0
    if flops_fn is not None:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as c:
            flops_fn()
        flops = float(c.get_total_flops())
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start, flops


def causal_score(model, tokenizer, texts, batch_size):
    from textebm.lm.scoring import score_sequences

    start, end = tokenizer.cls_token_id, tokenizer.sep_token_id
    seqs = [[start, *ids, end] for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    return score_sequences(model, seqs, tokenizer.pad_token_id, batch_size)


MEMORY_CHILD = r"""
import json, os, sys, torch
sys.path[:0] = json.loads(sys.argv[4])
n, which, folder = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.set_num_threads(2)
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
def reset_peak():  # Linux: writing 5 to clear_refs resets the peak resident set (VmHWM)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
def peak_rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
text = " ".join(["the"] * n)
if which == "textebm":
    from textebm.models.load import load_cloze
    from textebm.scoring.pll import mlm_token_scores
    model, tok = load_cloze(folder)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    base = rss()
    reset_peak()
    with torch.inference_mode():
        mlm_token_scores(model, ids, 4096)
else:
    from minicons import scorer
    s = scorer.MaskedLMScorer(folder, "cpu")
    s.tokenizer.batch_encode_plus = lambda *a, **k: s.tokenizer(*a, **k)  # removed in transformers 5
    base = rss()
    reset_peak()
    with torch.inference_mode():
        s.sequence_score([text], reduction=lambda x: x.sum(0).item())
peak = peak_rss()
print(json.dumps({"tokens": n, "which": which, "growth_mb": (peak - base) / 2**20}))
"""


def memory(which: str, folder: Path, n: int) -> float:
    paths = [str(MINICONS)] if which == "minicons" else []
    r = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(n), which, str(folder), json.dumps(paths)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return float("nan")
    return json.loads(r.stdout.strip().splitlines()[-1])["growth_mb"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=240)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--electric", default="")
    ap.add_argument("--mlm", default="")
    ap.add_argument("--twotower", default="")
    ap.add_argument("--no-minicons", action="store_true")
    ap.add_argument("--out", default="runs/bench-scoring")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    from textebm.precision import cpu_capability, cpu_flags
    from textebm.scoring.pll import cloze_scores, mlm_token_scores

    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    texts = ptb_sentences(args.sentences, Path("runs/bench-data"))
    models, causal = build_models(args)
    models = {k: (m.to(dtype), t) for k, (m, t) in models.items()}
    causal = causal.to(dtype)
    tok = models["electric"][1]
    n_tokens = [len(x) for x in tok(texts, add_special_tokens=False)["input_ids"]]
    mean_tokens = sum(n_tokens) / len(n_tokens)
    peak = matmul_peak(dtype)  # textebm.precision's one definition: 1024 x 1024, these threads
    bs = args.batch_size
    runs = {
        "electric (one pass)": lambda: cloze_scores(*models["electric"], texts, "electric", bs),
        "masked-LM PLL (textebm)": lambda: cloze_scores(*models["mlm"], texts, "mlm", bs),
        "two-tower": lambda: cloze_scores(*models["twotower"], texts, "twotower", bs),
        "causal LM": lambda: causal_score(causal, tok, texts, bs),
    }
    # PLL's FLOPs are those of the copies unpadded, one text at a time: the useful work (copies of
    # several texts share a pass, padded to its longest; that padding is not counted as achieved)
    mlm_ids = models["mlm"][1](texts, add_special_tokens=False)["input_ids"]
    useful = {"masked-LM PLL (textebm)": lambda: [mlm_token_scores(models["mlm"][0], ids) for ids in mlm_ids]}
    results = {}
    with torch.inference_mode():
        cloze_scores(*models["electric"], texts[:8], "electric", bs)
        cloze_scores(*models["mlm"], texts[:2], "mlm", bs)
        for name, fn in runs.items():
            sec, flops = timed(fn, useful.get(name, fn))
            results[name] = {"seconds": sec, "sentences_per_s": len(texts) / sec, "flops": flops,
                             "flop_per_s": flops / sec, "fraction_of_peak": flops / sec / peak}
            print(f"{name:28s} {len(texts) / sec:8.1f} sentences/s   {flops / sec / 1e9:7.1f} GFLOP/s "
                  f"({flops / sec / peak:.0%} of peak)", flush=True)
    if not args.no_minicons and ensure_minicons():
        sys.path.insert(0, str(MINICONS))
        from minicons import scorer

        folder = export_masked_lm(models["mlm"][0].float(), tok, out / "masked-lm-hf")
        mc = scorer.MaskedLMScorer(str(folder), "cpu", PLL_metric="original")
        patch_tokenizer(mc)
        if dtype == torch.bfloat16:
            mc.model = mc.model.to(dtype)

        def run_mc():
            res = []
            for s in range(0, len(texts), bs):
                res += mc.sequence_score(texts[s:s + bs], reduction=lambda x: x.sum(0).item())
            return res

        with torch.inference_mode():
            mc.sequence_score(texts[:2], reduction=lambda x: x.sum(0).item())  # warm-up
            sec, flops = timed(run_mc, run_mc)
            ours = [s.total for s in cloze_scores(*models["mlm"], texts[:20], "mlm", bs)]
            theirs = [mc.sequence_score([t], reduction=lambda x: x.sum(0).item())[0] for t in texts[:20]]
        results["masked-LM PLL (minicons)"] = {
            "seconds": sec, "sentences_per_s": len(texts) / sec, "flops": flops, "flop_per_s": flops / sec,
            "fraction_of_peak": flops / sec / peak,
            "max_abs_pll_difference_vs_textebm_20_sentences": max(abs(a - b) for a, b in zip(ours, theirs))}
        print(f"{'masked-LM PLL (minicons)':28s} {len(texts) / sec:8.1f} sentences/s   {flops / sec / 1e9:7.1f} "
              f"GFLOP/s; PLL differs from textebm's by at most "
              f"{results['masked-LM PLL (minicons)']['max_abs_pll_difference_vs_textebm_20_sentences']:.2e}",
              flush=True)
    mlm_dir = out / "masked-lm-textebm"
    if not (mlm_dir / "cloze.json").is_file():
        from textebm.models.cloze import save_cloze

        save_cloze(models["mlm"][0].float(), tok, mlm_dir)
    mem = {"textebm": {n: memory("textebm", mlm_dir, n) for n in (40, 400)}}
    if "masked-LM PLL (minicons)" in results:
        mem["minicons"] = {n: memory("minicons", out / "masked-lm-hf", n) for n in (40, 400)}
    e = results["electric (one pass)"]["sentences_per_s"]
    summary = {
        "cpu_capability": cpu_capability(), "cpu_bf16_flags": sorted(cpu_flags() & {"avx512_bf16", "amx_bf16"}),
        "precision": args.precision, "threads": torch.get_num_threads(), "batch_size": bs,
        "sentences": len(texts), "mean_tokens_per_sentence": mean_tokens,
        "matmul_peak_flop_per_s": peak, "methods": results,
        "electric_over_textebm_pll": e / results["masked-LM PLL (textebm)"]["sentences_per_s"],
        "electric_over_minicons_pll": (e / results["masked-LM PLL (minicons)"]["sentences_per_s"]
                                       if "masked-LM PLL (minicons)" in results else None),
        "speedup_over_pll_per_mean_token": e / results["masked-LM PLL (textebm)"]["sentences_per_s"] / mean_tokens,
        "masked_lm_pll_memory_growth_mb": mem,
    }
    (out / "bench_scoring.json").write_text(json.dumps(summary, indent=1))
    print(f"\nCPU {summary['cpu_capability']} (bf16 flags: {', '.join(summary['cpu_bf16_flags']) or 'none'}), "
          f"{args.precision}, {summary['threads']} threads, batch {bs}, {len(texts)} PTB test sentences of "
          f"{mean_tokens:.1f} tokens on average; matmul peak {peak / 1e9:.0f} GFLOP/s")
    print(f"Electric / textebm PLL: {summary['electric_over_textebm_pll']:.1f}x "
          f"({summary['speedup_over_pll_per_mean_token']:.2f} x mean tokens)")
    if summary["electric_over_minicons_pll"]:
        print(f"Electric / minicons PLL: {summary['electric_over_minicons_pll']:.1f}x")
    print("masked-LM PLL memory growth (MB) by text length:", json.dumps(mem))


if __name__ == "__main__":
    main()
