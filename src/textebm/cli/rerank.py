"""Rerank speech-recognition n-best lists with text scores (Clark et al. 2020, sec. 3.2): the argmax
over each n-best list of f(x|s) + lambda * score(x), lambda chosen per subset on --dev, applied to
--test; --write-texts writes the texts to score first (docs/rerank.md)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from textebm.data.normalize import PRESETS as NORMALIZE

log = logging.getLogger(__name__)

KIND = "rerank"
PLOT = "wer_vs_lambda.png"


@dataclass(kw_only=True)
class RerankConfig:
    dev: str = field(metadata={"help": "n-best JSON (awslabs/mlm-scoring format) to choose lambda on, per subset"})
    test: str = field(metadata={"help": "n-best JSON to rerank with the lambdas chosen on --dev"})
    scores: list[str] = field(default_factory=list, metadata={
        "help": "JSONL files of `textebm score` covering every hypothesis text of --dev and --test; one per "
                "method, each reranked separately"})
    out: str = field(default="", metadata={
        "help": "folder for metrics.json, chosen.jsonl, report.md and wer_vs_lambda.png"})
    grid: str = field(default="paper", metadata={
        "help": "lambda values to try: paper = 0.05, 0.10, ..., 1.0; wide = 0, the paper's, 1.25, 1.5, 2, 3, 5, 10",
        "choices": ["paper", "wide"]})
    versus: str = field(default="", metadata={
        "help": "also give every method's test WER change against this method (a --scores method name), with "
                "a paired bootstrap interval"})
    bootstrap: int = field(default=1000, metadata={
        "help": "bootstrap resamples of the test utterances for the intervals of WER changes (0: none)", "min": 0})
    seed: int = field(default=0, metadata={"help": "seed of the bootstrap resamples", "min": 0})
    top: int = field(default=0, metadata={
        "help": "keep only the N best hypotheses of each list by the speech score (0: all); with --write-texts "
                "too", "min": 0})
    normalize: str = field(default="none", metadata={
        "help": "look the hypotheses' text scores up (and, with --write-texts, write the texts) in this form "
                "(textebm.data.normalize): none = as written (or the form the score file records), ptb = lower "
                "case, clitics split (\"did n't\"), asr = lower case, no punctuation; WER always compares the "
                "texts as written", "choices": list(NORMALIZE)})
    write_texts: str = field(default="", metadata={
        "help": "only write the unique hypothesis texts of --dev and --test to this .txt (one a line) or "
                ".jsonl file, for `textebm score --input`, and stop"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace earlier `rerank` output in --out (or an existing --write-texts file)"})

    def check(self) -> None:
        from textebm.errors import TextebmError
        from textebm.options import refuse_unused

        if self.write_texts:
            refuse_unused(self, ["scores", "out", "grid", "versus", "bootstrap", "seed"],
                          "with --write-texts (which only writes the texts)")
            if Path(self.write_texts).suffix.lower() not in (".txt", ".jsonl"):
                raise TextebmError(f"--write-texts {self.write_texts}: name a .txt or .jsonl file")
            return
        if not self.scores:
            raise TextebmError("--scores: give at least one score file of `textebm score` (or --write-texts FILE "
                               "to write the texts to score)")
        if not self.out:
            raise TextebmError("--out: give a folder for the results")
        if self.versus and self.bootstrap == 0:
            raise TextebmError("--versus with --bootstrap 0: the change against another method comes with its "
                               "interval; give --bootstrap N (default 1000) or leave out --versus")


def rerank_command(cfg: RerankConfig) -> None:
    """Rerank --test with lambdas chosen on --dev; or, with --write-texts, write the texts to score."""
    from textebm.options import check_config

    check_config(cfg)
    if cfg.write_texts:
        n = write_texts(cfg)
        print(f"wrote {n} unique hypothesis texts to {cfg.write_texts}; score them with\n"
              f"  textebm score --model MODEL --input {cfg.write_texts} --out SCORES.jsonl")
        return
    out = run_rerank(cfg)
    print(f"wrote {out / 'report.md'}")


def write_texts(cfg: RerankConfig) -> int:
    """The unique hypothesis texts of --dev then --test (their --top best, in the form --normalize
    gives them), in order of first appearance."""
    from textebm.data.nbest import read_nbest, top_hypotheses
    from textebm.data.normalize import normalizer
    from textebm.errors import InputError, TextebmError
    from textebm.outputs import check_output_file, output_file

    target = Path(cfg.write_texts)
    check_output_file(target, cfg.overwrite, "--write-texts", kind="rerank --write-texts",
                      inputs=[("--dev", cfg.dev), ("--test", cfg.test)])
    norm = normalizer(cfg.normalize)
    texts = []
    for p in (cfg.dev, cfg.test):
        for u in read_nbest(p):
            for h in top_hypotheses(u, cfg.top).hyps:
                texts.append(norm(h.text))
                if not texts[-1].strip():  # `score` has nothing to score: no line would ever match it
                    raise InputError(p, f"utterance {u.id!r}, {h.key}: the hypothesis {h.text!r} is empty in the "
                                        f"form of --normalize {cfg.normalize}, which `textebm score` cannot score; "
                                        "give another --normalize, or drop the hypothesis from the list", h.line)
    texts = list(dict.fromkeys(texts))
    jsonl = target.suffix.lower() == ".jsonl"
    if not jsonl:
        bad = next((t for t in texts if "\n" in t or "\r" in t or t != t.strip()), None)
        if bad is not None:  # a .txt line is stripped when read back: the score would not match
            raise TextebmError(f"--write-texts {target}: the hypothesis text {bad!r} has a line break or spaces at "
                               "an end, which a .txt file cannot keep; write a .jsonl file instead")
    with output_file(target, "rerank --write-texts") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"t{i}", "text": t}, ensure_ascii=False) + "\n" if jsonl else t + "\n")
    return len(texts)


def run_rerank(cfg: RerankConfig) -> Path:
    from textebm.data.nbest import read_nbest
    from textebm.errors import InputError, TextebmError
    from textebm.io import atomic_write, write_json, write_jsonl
    from textebm.outputs import check_output_dir, output_dir
    from textebm.scoring.rerank import (GRIDS, attach, evaluate, keep_top, method_normalization, plot_curves, prepare,
                                        read_score_files, render_report)

    check_output_dir(cfg.out, KIND, cfg.overwrite)
    grid = GRIDS[cfg.grid]
    items = {}
    for split, path in (("dev", cfg.dev), ("test", cfg.test)):
        items[split] = [keep_top(it, cfg.top) for it in prepare(read_nbest(path))]
        words: dict[str, int] = {}
        for it in items[split]:
            words[it.subset] = words.get(it.subset, 0) + it.words
        empty = [s for s, w in words.items() if w == 0]
        if empty and split == "dev":
            raise InputError(path, f"the references of subset {empty[0]!r} hold no words: WER is undefined")
    for p in map(Path, cfg.scores):  # named by the option, before its reader's "file not found"
        if p.is_dir():
            raise TextebmError(f"--scores {p}: is a folder; give the JSONL file that `textebm score` wrote")
        if not p.is_file():
            raise TextebmError(f"--scores {p}: file not found; give the JSONL file that `textebm score` wrote")
    files = read_score_files(cfg.scores)
    opts = (f" --top {cfg.top}" if cfg.top else "") + (f" --normalize {cfg.normalize}" if cfg.normalize != "none" else "")
    how = (f"write the texts with `textebm rerank --dev {cfg.dev} --test {cfg.test}{opts} --write-texts texts.txt`, "
           "then score them: `textebm score --model MODEL --input texts.txt --out SCORES.jsonl`")
    norms = {sf.method: method_normalization(cfg.normalize, sf) for sf in files}
    methods = {sf.method: (attach(items["dev"], sf, how, norms[sf.method]), attach(items["test"], sf, how,
                                                                                   norms[sf.method])) for sf in files}
    if cfg.versus and cfg.versus not in methods:
        raise TextebmError(f"--versus {cfg.versus}: not one of the --scores methods ({', '.join(methods)})")
    metrics, chosen = evaluate(items["dev"], items["test"], methods, grid, cfg.versus, cfg.bootstrap, cfg.seed)
    sources = {"dev": cfg.dev, "test": cfg.test, "grid": cfg.grid, "bootstrap": cfg.bootstrap,
               "scores": {sf.method: str(sf.path) for sf in files}, "normalize": norms, "top": cfg.top}
    metrics = {"dev": cfg.dev, "test": cfg.test, "grid_name": cfg.grid, "scores": sources["scores"], "top": cfg.top,
               "normalize": norms, **metrics}
    with output_dir(cfg.out, KIND, cfg.overwrite) as tmp:
        write_json(tmp / "metrics.json", metrics)
        write_jsonl(tmp / "chosen.jsonl", chosen)
        plot_curves(metrics, tmp / PLOT)
        with atomic_write(tmp / "report.md") as f:
            f.write(render_report(metrics, PLOT, sources))
    for s, e in metrics["subsets"].items():
        for name, m in e["methods"].items():
            log.info("subset %s, %s: lambda %g, dev WER %.2f%% (1-best %.2f%%), test WER %s (1-best %s)", s, name,
                     m["lambda"], 100 * m["dev_wer"], 100 * e["one_best"]["dev_wer"],
                     *("–" if w is None else f"{100 * w:.2f}%" for w in (m["test_wer"], e["one_best"]["test_wer"])))
    return Path(cfg.out)


COMMAND = (RerankConfig, rerank_command)
