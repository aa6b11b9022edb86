"""Kneser-Ney n-gram baseline scorer for the ASR n-best benchmark (pure Python, no dependencies).

    python bench/asr_nbest/ngram_scores.py                      # defaults below
    python bench/asr_nbest/ngram_scores.py --train PTB/train.jsonl --input data/hyps.jsonl \
        --out data/ngram_scores.jsonl --order 3 --eval PTB/test.jsonl

Trains an interpolated modified Kneser-Ney model (Chen & Goodman 1999: three discounts per order
from the count-of-counts; highest order on counts, lower orders on continuation counts, except
n-grams starting with <s>, which keep their counts as in KenLM; the unigram level interpolated
with the uniform distribution over the vocabulary) on PTB train (jsonl with "text"), and writes,
for every line of --input (jsonl with "id" and "text"; default: data/hyps.jsonl, each unique
hypothesis text of dev.json and test.json once), a line in the format of `textebm score`:

    {"id": str, "text": str, "method": "ngram", "score": ln P(words, </s> | <s>), "n_tokens": int}

score is the log-probability in nats with the sentence end included; n_tokens = words + 1 (the
</s>). Words outside the training vocabulary are scored as <unk> (PTB's own unknown-word token,
which the training text holds). --eval FILE prints the perplexity on FILE as a sanity check
(a KN trigram on PTB scores about 148 on test).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
BOS, EOS, UNK = "<s>", "</s>", "<unk>"


class KneserNey:
    """Interpolated modified Kneser-Ney n-gram LM over whitespace tokens."""

    def __init__(self, sentences: list[list[str]], order: int = 3):
        if order < 1:
            raise ValueError("order must be >= 1")
        self.order = order
        # raw[k]: counts of k-grams (k = 1..order), as tuples
        raw: list[dict[tuple, int]] = [dict() for _ in range(order + 1)]
        for sent in sentences:
            toks = [BOS] + sent + [EOS]
            for k in range(1, order + 1):
                table = raw[k]
                for i in range(max(1, k - 1), len(toks)):  # never predict <s>
                    g = tuple(toks[i - k + 1:i + 1])
                    table[g] = table.get(g, 0) + 1
        # k-grams used at level k: highest order -> counts; lower -> continuation counts
        # N1+(. g) (number of distinct left extensions), but counts for grams starting with <s>.
        self.vocab = {g[0] for g in raw[1]} | {UNK}
        self.vocab.discard(BOS)
        adj: list[dict[tuple, int]] = [dict() for _ in range(order + 1)]
        adj[order] = dict(raw[order])
        for k in range(1, order):
            cont: dict[tuple, int] = defaultdict(int)
            for g in raw[k + 1]:
                cont[g[1:]] += 1
            table = {}
            for g, c in raw[k].items():
                table[g] = c if g[0] == BOS else cont.get(g, 0)
            adj[k] = {g: c for g, c in table.items() if c > 0}
        # discounts per level from the count-of-counts of the counts used there
        self.discounts: list[tuple[float, float, float]] = [(0.0, 0.0, 0.0)]
        for k in range(1, order + 1):
            n = [0] * 5
            for c in adj[k].values():
                if c <= 4:
                    n[c] += 1
            if min(n[1:5]) == 0:  # tiny corpora: fall back to one discount of 0.75
                self.discounts.append((0.75, 0.75, 0.75))
                continue
            y = n[1] / (n[1] + 2 * n[2])
            self.discounts.append((1 - 2 * y * n[2] / n[1], 2 - 3 * y * n[3] / n[2],
                                   3 - 4 * y * n[4] / n[3]))
        # per level k: context (k-1 tuple) -> (total, gamma numerator) and gram -> discounted mass
        self.ctx: list[dict[tuple, tuple[float, float]]] = [dict() for _ in range(order + 1)]
        self.num: list[dict[tuple, float]] = [dict() for _ in range(order + 1)]
        for k in range(1, order + 1):
            d = self.discounts[k]
            totals: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0])
            for g, c in adj[k].items():
                dc = min(d[min(c, 3) - 1], c)
                self.num[k][g] = c - dc
                t = totals[g[:-1]]
                t[0] += c
                t[1] += dc
            self.ctx[k] = {h: (t[0], t[1]) for h, t in totals.items()}

    def prob(self, word: str, context: tuple[str, ...]) -> float:
        """P(word | context), context = the preceding tokens (only the last order-1 are used)."""
        if word not in self.vocab:
            word = UNK
        context = tuple(context[-(self.order - 1):]) if self.order > 1 else ()
        p = 1.0 / len(self.vocab)
        for k in range(1, len(context) + 2):  # unigram level up to the longest context
            h = context[len(context) - (k - 1):] if k > 1 else ()
            stats = self.ctx[k].get(h)
            if stats is None:  # unseen context: its level passes the lower one through
                continue
            total, gamma_num = stats
            p = self.num[k].get(h + (word,), 0.0) / total + gamma_num / total * p
        return p

    def sentence_logprob(self, words: list[str]) -> float:
        """ln P(words </s> | <s>), in nats."""
        toks = [BOS] + [w if w in self.vocab else UNK for w in words] + [EOS]
        lp = 0.0
        for i in range(1, len(toks)):
            lp += math.log(self.prob(toks[i], tuple(toks[max(0, i - self.order + 1):i])))
        return lp


def read_texts(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", default=str(HERE / "work" / "ptb" / "train.jsonl"))
    ap.add_argument("--input", default=str(HERE / "data" / "hyps.jsonl"),
                    help="jsonl with id and text (default: the benchmark's unique hypotheses)")
    ap.add_argument("--out", default=str(HERE / "data" / "ngram_scores.jsonl"))
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--eval", default=None, help="jsonl with text: print perplexity on it")
    args = ap.parse_args()

    t0 = time.perf_counter()
    train = [r["text"].split() for r in read_texts(Path(args.train))]
    lm = KneserNey(train, args.order)
    print(f"trained KN {args.order}-gram on {len(train)} sentences, vocabulary {len(lm.vocab)}, "
          f"discounts " + ", ".join(f"{k}: " + "/".join(f"{d:.3f}" for d in lm.discounts[k])
                                    for k in range(1, args.order + 1))
          + f" ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    if args.eval:
        rows = read_texts(Path(args.eval))
        lp = sum(lm.sentence_logprob(r["text"].split()) for r in rows)
        n = sum(len(r["text"].split()) + 1 for r in rows)
        print(f"perplexity on {args.eval}: {math.exp(-lp / n):.1f} ({n} tokens, </s> included)",
              file=sys.stderr, flush=True)
    rows = read_texts(Path(args.input))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            words = r["text"].split()
            f.write(json.dumps({"id": str(r["id"]), "text": r["text"], "method": "ngram",
                                "score": lm.sentence_logprob(words), "n_tokens": len(words) + 1},
                               ensure_ascii=False) + "\n")
    tmp.replace(out)
    print(f"wrote {out} ({len(rows)} texts, {time.perf_counter() - t0:.0f} s in all)",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
