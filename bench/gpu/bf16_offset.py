"""The bf16 offset of a causal LM's token log-probabilities against fp32, on the machine at hand
(the GPU when there is one): each precision as `textebm` runs it for inference (precision.py),
the log-probabilities computed in fp32 (lm.scoring.next_token_logprobs) in both.

    python bench/gpu/bf16_offset.py LM_FOLDER DATA_FOLDER [--windows 400] [--length 64] --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from textebm.data.readers import load_split
from textebm.lm.eval_command import _load
from textebm.lm.scoring import next_token_logprobs


def windows(tokenizer, data: str, n: int, length: int) -> torch.Tensor:
    """(n, 1 + length) token ids: [bos] and a window, consecutive non-overlapping windows of the test
    split's documents (textebm's LMs are trained with [bos] first, as `lm score` scores)."""
    rows = []
    for ex in load_split(data, "test"):
        ids = tokenizer(ex["text"], add_special_tokens=False)["input_ids"]
        rows += [[tokenizer.bos_token_id] + ids[i:i + length] for i in range(0, len(ids) - length + 1, length)]
        if len(rows) >= n:
            break
    return torch.tensor(rows[:n])


@torch.inference_mode()
def logprobs(model, ids: torch.Tensor, batch: int = 50) -> torch.Tensor:
    out = []
    for i in range(0, len(ids), batch):
        x = ids[i:i + batch].to(next(model.parameters()).device)  # (B, T)
        out.append(next_token_logprobs(model(input_ids=x).logits, x, torch.ones_like(x)).double().cpu())
    return torch.cat(out)  # (N, T-1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("lm"), ap.add_argument("data")
    ap.add_argument("--windows", type=int, default=400), ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    res, lp = {}, {}
    for p in ("fp32", "bf16"):
        model, tok, _, choice = _load(Path(a.lm), p)
        ids = windows(tok, a.data, a.windows, a.length)
        logprobs(model, ids[:2])  # warm-up
        t = time.perf_counter()
        lp[p] = logprobs(model, ids)
        res[p] = {"seconds": time.perf_counter() - t, "nll_per_token": float(-lp[p].mean()),
                  "device": str(next(model.parameters()).device), "reason": choice.reason}
    d = (lp["bf16"] - lp["fp32"]).abs()
    res["offset"] = {"mean_abs": float(d.mean()), "max_abs": float(d.max()),
                     "nll_delta": res["bf16"]["nll_per_token"] - res["fp32"]["nll_per_token"],
                     "tokens": d.numel(), "windows": len(lp["fp32"])}
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
