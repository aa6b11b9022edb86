"""Benchmark: the cost of a joint EBM training step (paper a) relative to a baseline step.

    .venv/bin/python bench/bench_joint_step.py --data runs/quickstart/data \
        --noise runs/quickstart/noise.jsonl [--encoder minilm-l6] [--examples 640] [--k 1]

Three ways to train MiniLM on the same rt-polarity batches, side by side in one process, bf16
autocast, fused AdamW, batch 32, length-bucketed data batches:

- baseline:        cross-entropy on the data batch only;
- joint, paired:   + NCE, each example's noise in its batch, data and noise padded together into
                   one pass (the straightforward implementation);
- joint, bucketed: + NCE, noise bucketed by its own length (`noise_stream`), two passes each padded
                   to its own length (what `classify train` does).

Each variant trains a fresh copy of the same initial model for one pass over `--examples`
examples, twice in the order A B C A B C; the best of the two is kept (the machine is shared).
Printed: seconds per step, padded tokens per step and the share of them that is padding, and the
ratio of each joint variant to the baseline. The ideal joint step with K noise per example costs
(1 + K) baseline steps.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--noise", required=True)
    ap.add_argument("--encoder", default="minilm-l6")
    ap.add_argument("--examples", type=int, default=640)
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()

    from textebm.assets import resolve_model
    from textebm.classify.data import (Collator, attach_noise, batch_inputs, encode, encode_examples, label_vocab,
                                       noise_stream, read_noise)
    from textebm.models.classifier import ClassifierSpec
    from textebm.models.load import build_classifier
    from textebm.classify.train import joint_forward
    from textebm.data.readers import load_split
    from textebm.losses.nce import nce_loss
    from textebm.data.batching import BucketBatchSampler
    from textebm.data.batching import stream_sampler

    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    rows = load_split(args.data, "train")[:args.examples]
    labels = label_vocab(rows, args.data)
    model0, tok = build_classifier(resolve_model(args.encoder), ClassifierSpec(labels=labels, energy="hidden"))
    examples = encode_examples(tok, rows, labels, 64)
    noise_rows = read_noise(args.noise)
    attach_noise(examples, rows, noise_rows, args.noise)
    noise = encode(tok, noise_rows, 64)
    lengths = [len(e.ids) for e in examples]
    batches = list(BucketBatchSampler(lengths, args.batch_size, seed=0))
    pad = tok.pad_token_id
    collate = Collator(pad)
    stream = noise_stream(examples, noise, args.k, args.batch_size, pad)
    noise_batches = list(stream_sampler(stream, 0, len(batches)))

    def own_noise(b: list[int]) -> list[int]:  # each example's own noise samples, in its batch
        return [examples[i].noise[j % len(examples[i].noise)] for i in b for j in range(args.k)]

    def cells(inputs: dict) -> int:
        return inputs["input_ids"].numel()

    def real(inputs: dict) -> int:
        return int(inputs["attention_mask"].sum())

    def run(variant: str) -> tuple[float, float, float]:
        model = copy.deepcopy(model0).train()
        opt = torch.optim.AdamW(model.parameters(), lr=5e-5, fused=True)
        padded = tokens = 0
        t0 = time.perf_counter()
        for b, nb in zip(batches, noise_batches):
            batch = collate([examples[i] for i in b])
            batch.noise = batch_inputs([noise[n] for n in (nb if variant == "joint, bucketed" else own_noise(b))], pad)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                if variant == "baseline":
                    logits, _ = model(**batch.data)
                    loss = torch.nn.functional.cross_entropy(logits, batch.labels)
                    padded, tokens = padded + cells(batch.data), tokens + real(batch.data)
                else:
                    separate = variant == "joint, bucketed"
                    logits, e_pos, e_neg = joint_forward(model, batch.data, batch.noise, separate=separate)
                    loss = torch.nn.functional.cross_entropy(logits, batch.labels) + nce_loss(e_pos, e_neg, args.k).loss
                    T = max(batch.data["input_ids"].shape[1], batch.noise["input_ids"].shape[1])
                    n_rows = batch.data["input_ids"].shape[0] + batch.noise["input_ids"].shape[0]
                    padded += cells(batch.data) + cells(batch.noise) if separate else n_rows * T
                    tokens += real(batch.data) + real(batch.noise)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        seconds = (time.perf_counter() - t0) / len(batches)
        return seconds, padded / len(batches), 1 - tokens / padded

    variants = ["baseline", "joint, paired", "joint, bucketed"]
    run("baseline")  # warm-up: allocator, thread pools, kernels
    best: dict[str, tuple[float, float, float]] = {}
    for _ in range(2):
        for v in variants:
            r = run(v)
            if v not in best or r[0] < best[v][0]:
                best[v] = r
    base = best["baseline"][0]
    print(f"{len(examples)} examples, {len(batches)} steps of batch {args.batch_size}, K={args.k}, "
          f"bf16 autocast, {torch.get_num_threads()} threads; ideal joint/baseline = {1 + args.k:.1f}")
    print(f"{'variant':<17} {'s/step':>8} {'cells/step':>11} {'padding':>8} {'x baseline':>11}")
    for v in variants:
        s, c, w = best[v]
        print(f"{v:<17} {s:8.3f} {c:11.0f} {w:8.1%} {s / base:11.2f}")


if __name__ == "__main__":
    main()
