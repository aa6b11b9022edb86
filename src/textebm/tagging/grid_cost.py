"""What a cell of `tag grid` costs: its estimated CPU seconds on one thread, for the plan
(`--plan`), from its sentence counts and epochs and per-sentence constants measured on brown-pos."""

from __future__ import annotations

import math

# CPU seconds (user + sys) on one thread, AMD EPYC with avx512_bf16, `--precision auto` (bf16) for
# training and fp32 for evaluation, at the default config's sizes (embed 64, hidden 100, noise LM
# 64/100, batch 32): per sentence and pass, from `time`d `tag train` / `tag eval` runs on brown-pos
# (docs/tag-grid.md, bench/results/tagging/README.md: the runs, and how to recalibrate). A DNCE sentence costs a fixed part and
# a part per word of the vocabulary (the noise LM's softmax while it draws and scores, the embeddings'
# gradients and AdamW): 13.1 ms at 12.6k words and 37.5 ms at 45.6k (pools of 12,500 and 125,000
# sentences, at most 60 tokens each, quiet), so 3.8 ms + 0.74 us a word; 11.2 ms measured at 10k.
SECONDS = {"labelled": 0.0016,      # one labelled sentence through the CRF's forward + backward
           "unlabelled": 0.0038,    # one unlabelled sentence of DNCE (with its noise sentences and noise LM) ...
           "per_word": 0.74e-6,     # ... plus this per word of the vocabulary
           "frozen": 0.001,         # pretrain stage 2: a labelled sentence, the BiLSTM frozen
           "eval": 0.00025,         # one sentence tagged (Viterbi) by `tag eval` or a dev evaluation
           "start": 4.0,            # reading the data, drawing the split, building the vocabulary: per run
           "pool": 13.0}            # reading and cutting the `unlabelled` corpora (184k rows): per run that has them
# --char-cnn's cost as a factor of the word-only network's, from `tag train` runs side by side
# (docs/tag-grid.md): 40 DNCE steps of 32 sentences at 2 % / U/L 50 of a 45,000-sentence labelled set, 0.52 s a step
# against 0.24 (bf16, one thread); a labelled or tagged sentence about twice.
CHAR_COST = {"unlabelled": 2.2, "labelled": 2.0, "eval": 2.0}
# The vocabulary of labelled + n pool sentences (min_count 2) grows as about 41 n^0.594 words: through
# the 4.3k and 59.7k counted at 2,500 and 214k (brown-pos with sotu, news, shakespeare), 10 % below the
# 12.6k and 31.6k counted at 12,500 and 62,500.
VOCAB_GROWTH = (41.0, 0.594)


def dnce_seconds(n_unlabelled: int, opts: dict) -> float:
    """One unlabelled sentence's DNCE pass, for a vocabulary grown from `n_unlabelled` sentences
    (VOCAB_GROWTH), or `max_words` when that is smaller."""
    words = VOCAB_GROWTH[0] * n_unlabelled ** VOCAB_GROWTH[1]
    if opts.get("max_words", 0):
        words = min(words, opts["max_words"])
    return SECONDS["unlabelled"] + SECONDS["per_word"] * words


def cell_seconds(cfg: dict, method: str, proportion: float, ratio: int, opts: dict, eval_sentences: int,
                 test_sentences: int) -> float:
    """Estimated CPU seconds on one thread of the cell (`method`, `proportion`, U/L `ratio`) of the
    grid config `cfg` whose `tag train` options are `opts`: `eval_sentences` tagged by each dev
    evaluation, `test_sentences` by its tests. A joint cell's supervised start is the supervised
    cell's; a stage 1 shared by a pool's cells is counted once, in the first of pretrain, frozen
    and joint."""
    n_lab = round(proportion * cfg["labelled"])
    batch = opts.get("batch_size", 32)
    epochs = opts.get("epochs", 1.0)

    def passes(n: int, epochs: float, max_steps: int) -> float:  # sentences processed
        return min(epochs * n, max_steps * batch) if max_steps else epochs * n

    def evaluations(n: int) -> float:  # dev sentences tagged: after each full epoch run, and at the end
        run = passes(n, epochs, opts.get("max_steps", 0)) / n
        return eval_sentences * (math.floor(run) + 1)

    chars = CHAR_COST if opts.get("char_cnn") else {"labelled": 1.0, "unlabelled": 1.0, "eval": 1.0}
    t = SECONDS["start"] + test_sentences * SECONDS["eval"] * chars["eval"]
    n_unl = ratio * n_lab
    dnce = dnce_seconds(n_unl, opts) * chars["unlabelled"]
    labelled = SECONDS["labelled"] * chars["labelled"]
    evals = evaluations(n_unl if method == "joint" else n_lab) * SECONDS["eval"] * chars["eval"]
    if method == "supervised":
        return t + passes(n_lab, epochs, opts.get("max_steps", 0)) * labelled + evals
    # stage 1, counted once per pool: in the pretrain cell, or where there is none, in frozen's or joint's
    shares = [m for m in ("pretrain", "frozen", "joint") if m in cfg["methods"]
              and (m != "joint" or opts.get("from_pretrained"))]
    if method in ("pretrain", "frozen") or opts.get("from_pretrained"):
        if shares and shares[0] == method:
            t += SECONDS["start"] + passes(n_unl, opts.get("pretrain_epochs", 1.0), opts.get("pretrain_steps", 0)) * dnce
        t += SECONDS["pool"] * bool(cfg["unlabelled"])
    if method in ("pretrain", "frozen"):
        stage2 = SECONDS["frozen"] * chars["labelled"] if opts.get("freeze") else labelled
        return t + passes(n_lab, epochs, opts.get("max_steps", 0)) * stage2 + evals
    # joint: each step an unlabelled batch by DNCE and a labelled batch of the same size by the CRF
    t += passes(n_unl, epochs, opts.get("max_steps", 0)) * (dnce + labelled)
    return t + evals + SECONDS["pool"] * bool(cfg["unlabelled"]) * (not opts.get("from_pretrained"))
