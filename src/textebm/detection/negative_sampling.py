"""Negatives of windows in memory (Bakhtin et al. 2019, sec. 4.1-4.2): the library under
`textebm negatives generate` (`textebm.detection.negatives`, the command: files, options, resume).

`windows_of` cuts the windows of a dataset split in the shared vocabulary; `NegativeSampler`
wraps a causal LM (in the shared vocabulary, or a foreign one that continues the decoded context)
and `sample_negatives(windows, NegativesSpec(...))` returns each window's row with its k negatives
and their log q. Each negative draws from its own generator seeded by (seed, window, j), so the
rows depend neither on the batch size nor on which windows are sampled together.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from textebm.data.readers import load_split
from textebm.data.streams import doc_streams
from textebm.detection.windows import assemble, context_ids, make_windows
from textebm.errors import TextebmError
from textebm.lm.generate import Sampling, fixed_length_banned, generate_groups
from textebm.models.lm import special_ids
from textebm.seeds import derive_seed
from textebm.tokenizer import same_vocab


def corpus_name(data: str | Path, corpus: str = "") -> str:
    return corpus or Path(data).resolve().name


def windows_of(data: str | Path, split: str, vocab, length: int, contexts: list[int], *, stride: int = 0,
               seed: int = 0, max_windows: int = 0, corpus: str = "") -> list:
    """The windows of split `split` of dataset folder `data` in the vocabulary `vocab` (stride 0:
    L/4); for rows already in memory call `textebm.detection.windows.make_windows`."""

    rows = load_split(data, split)
    stride = stride or max(length // 4, 1)
    wins = make_windows(doc_streams(rows, vocab), corpus_name(data, corpus), split, length, stride,
                        contexts, seed, max_windows)
    if not wins:
        raise TextebmError(f"--data {data}: split {split!r} has no document of {length} tokens")
    return wins


@dataclass(frozen=True)
class NegativesSpec:
    """`k` negatives per window, drawn from the `top_k` most likely tokens (0: all) at
    `temperature`, seeded by (`seed`, window, j); `batch_size` sequences generated together
    (changes no token)."""

    k: int = 3
    top_k: int = 10
    temperature: float = 1.0
    seed: int = 0
    batch_size: int = 64


@dataclass
class _NegJob:
    group: str  # the window's key
    part: int  # j, the negative's place
    context: list[int]
    max_new: int
    seed: int


class NegativeSampler:
    """A causal LM that writes the negatives of windows, in the shared vocabulary `vocab` or
    through its own (a foreign generator: suffixes only). `name` is how errors call it."""

    def __init__(self, model, tokenizer, meta, vocab, name: str = "--generator"):
        self.model, self.tokenizer, self.vocab = model, tokenizer, vocab
        self.sp = special_ids(tokenizer, meta)
        self.direction = meta.direction
        self.foreign = not same_vocab(tokenizer, vocab)
        if self.foreign and self.direction != "l2r":
            raise TextebmError(f"{name}: a generator with its own vocabulary completes "
                               "suffixes only (left to right); this one is r2l")
        if meta.objective != "causal":
            raise TextebmError(f"{name}: needs a causal LM, not an {meta.objective} one")
        self.banned = fixed_length_banned(self.sp)  # exactly L - c tokens

    def jobs(self, window) -> tuple[list[int], int]:
        """(model input, tokens to generate) of a window's negatives."""

        ctx = context_ids(window, self.direction)
        n = len(window.ids) - window.context_len
        if self.foreign:
            text = self.vocab.decode(ctx)
            foreign = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            return [self.sp.bos, *foreign], 3 * n + 8  # enough foreign tokens for n shared ones
        return [self.sp.bos, *(ctx if self.direction == "l2r" else ctx[::-1])], n

    def finish(self, window, tokens: list[int]) -> list[int] | None:
        """The generated part in shared ids, reading order, exactly L − c long (None: too short)."""
        n = len(window.ids) - window.context_len
        if self.foreign:
            ids = self.vocab(self.tokenizer.decode(tokens), add_special_tokens=False)["input_ids"]
            return ids[:n] if len(ids) >= n else None
        return tokens[::-1] if self.direction == "r2l" else list(tokens)

    def iter_negatives(self, windows: list, spec: NegativesSpec) -> Iterator[tuple[int, list[dict]]]:
        """Generate `spec.k` negatives for each window, batch by batch: yields (windows done, their
        rows), a row being {key, doc, start, context_len, positive, negatives, neg_logq} (log q
        under the sampling distribution; None for a foreign generator). A window whose foreign
        continuation re-tokenises into fewer than L − c tokens has no row."""

        by_key = {w.key: w for w in windows}
        jobs = [_NegJob(w.key, j, *self.jobs(w), derive_seed(spec.seed, w.key, j, "negative"))
                for w in windows for j in range(spec.k)]
        sampling = Sampling(spec.top_k or self.model.config.vocab_size, spec.temperature, self.sp.eos, self.sp.pad,
                            self.banned)
        per_batch = max(1, spec.batch_size // spec.k)  # windows; their k negatives in one batch
        for _, finished in generate_groups(self.model, jobs, per_batch * spec.k, sampling, lambda _: spec.k):
            rows = []
            for key, parts in finished:
                w = by_key[key]
                got = [(self.finish(w, parts[j][1].tokens), parts[j][1].logprob) for j in range(spec.k)]
                if any(p is None for p, _ in got):
                    continue
                rows.append({"key": w.key, "doc": w.doc, "start": w.start, "context_len": w.context_len,
                             "positive": list(w.ids), "negatives": [assemble(w, self.direction, p) for p, _ in got],
                             "neg_logq": [None if self.foreign else lq for _, lq in got]})
            yield len(finished), rows

    def sample_negatives(self, windows: list, spec: NegativesSpec) -> list[dict]:
        """The rows of `iter_negatives`, in the windows' order, in memory."""
        return [row for _, rows in self.iter_negatives(windows, spec) for row in rows]
