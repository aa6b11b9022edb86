"""The batched top-k sampler and `lm sample` on a tiny random Llama (hidden 32, 2 layers, vocab 96)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from textebm.errors import TextebmError
from textebm.data.batching import left_pad
from textebm import io
from textebm.lm import generate as generate_module
from textebm.lm.generate import generate, positions
from textebm.sampling import sample_top_k
from textebm.models.lm import LMMeta, save_lm, special_ids
from textebm.lm.sample_command import JobSpec, SampleConfig, make_job, sample_file
from textebm.models.load import load_lm

SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<mask>", "<sep>"]
WORDS = [f"w{i}" for i in range(90)]


def make_tiny_lm(path: Path, objective: str = "causal", direction: str = "l2r", seed: int = 0) -> Path:
    """Save a tiny random LlamaForCausalLM with a WordLevel tokenizer and textebm meta to `path`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + WORDS)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>",
                                        bos_token="<s>", eos_token="</s>",
                                        additional_special_tokens=["<mask>", "<sep>"])
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         pad_token_id=0, bos_token_id=2, eos_token_id=3)
    model = LlamaForCausalLM(config)
    infill = objective == "infill"
    meta = LMMeta(objective=objective, direction=direction, mask_ratio=0.4 if infill else None,
                  bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                  mask_token="<mask>" if infill else None, sep_token="<sep>" if infill else None)
    save_lm(model, tokenizer, meta, path)
    return path


def write_data(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def sentence(i: int, n: int) -> str:
    return " ".join(WORDS[(7 * i + 3 * t) % len(WORDS)] for t in range(n))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lms")
    return {"l2r": make_tiny_lm(root / "l2r"), "r2l": make_tiny_lm(root / "r2l", direction="r2l", seed=1),
            "infill": make_tiny_lm(root / "infill", objective="infill", seed=2)}


@pytest.fixture(scope="module")
def l2r(models):
    model, tokenizer, meta = load_lm(models["l2r"])
    return model, tokenizer, meta, special_ids(tokenizer, meta)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    rows = [{"id": f"s{i}", "text": sentence(i, 3 + (5 * i) % 9), "label": "pos" if i % 2 else "neg"}
            for i in range(7)]
    return write_data(tmp_path_factory.mktemp("data") / "train.jsonl", rows).parent


CONTEXTS = [[2, 10, 11, 12, 13, 14, 15, 16], [2, 20], [2, 30, 31, 32], [2, 40, 41, 42, 43, 44]]
MAX_NEW = [12, 6, 20, 9]


def gens(seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


# ---------------------------------------------------------------- the sampling step


def test_sample_top_k_inverse_cdf_by_hand():
    # one row, logits log(4), log(3), log(2), log(1): top-3 probabilities 4/9, 3/9, 2/9
    logits = torch.log(torch.tensor([[1.0, 4.0, 2.0, 3.0]]))
    cases = [(0.0, 1, 4 / 9), (0.44, 1, 4 / 9), (0.45, 3, 3 / 9), (0.77, 3, 3 / 9), (0.78, 2, 2 / 9),
             (0.999, 2, 2 / 9)]
    for u, token, q in cases:
        tok, logq = sample_top_k(logits, 3, 1.0, torch.tensor([u]))
        assert int(tok) == token, u
        assert float(logq) == pytest.approx(math.log(q), abs=1e-6)
    # temperature 0.5 squares the ratios: 16, 9, 4 over 29
    tok, logq = sample_top_k(logits, 3, 0.5, torch.tensor([0.6]))
    assert int(tok) == 3 and float(logq) == pytest.approx(math.log(9 / 29), abs=1e-6)
    # untruncated (k >= V): the CDF in vocabulary order, 1/10, 4/10, 2/10, 3/10, a banned token skipped
    cases = [(0.0, 0, 1 / 10), (0.09, 0, 1 / 10), (0.11, 1, 4 / 10), (0.49, 1, 4 / 10), (0.51, 2, 2 / 10),
             (0.71, 3, 3 / 10), (0.999, 3, 3 / 10)]
    for k in (4, 50):
        for u, token, q in cases:
            tok, logq = sample_top_k(logits, k, 1.0, torch.tensor([u]))
            assert int(tok) == token and float(logq) == pytest.approx(math.log(q), abs=1e-6), (k, u)
    banned = torch.log(torch.tensor([[1.0, 0.0, 2.0, 3.0]]))  # token 1 at -inf
    assert [int(sample_top_k(banned, 4, 1.0, torch.tensor([u]))[0]) for u in (0.16, 0.17, 0.5)] == [0, 2, 3]


def test_left_padding_gives_the_same_logits_as_single_sequences(l2r):
    model, *_ = l2r
    ids, mask = left_pad(CONTEXTS, pad=0)  # (B, T)
    with torch.no_grad():
        batched = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits
        for b, ctx in enumerate(CONTEXTS):
            alone = model(input_ids=torch.tensor([ctx])).logits[0]
            torch.testing.assert_close(batched[b, -len(ctx):], alone, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- generate: fast path vs reference


def test_cached_sampling_equals_uncached(l2r):
    model, _, _, sp = l2r
    fast = generate(model, CONTEXTS, MAX_NEW, gens([1, 2, 3, 4]), sp.eos, sp.pad, top_k=20)
    slow = generate(model, CONTEXTS, MAX_NEW, gens([1, 2, 3, 4]), sp.eos, sp.pad, top_k=20, use_cache=False)
    assert [g.tokens for g in fast] == [g.tokens for g in slow]
    for f, s in zip(fast, slow):
        assert f.logprob == pytest.approx(s.logprob, abs=1e-4)
    assert [len(g.tokens) for g in fast] == MAX_NEW  # random weights: [eos] is not likely here


def test_one_context_shared_by_every_row_equals_the_reference(l2r):
    """The shared-context fast path (the context run once, its keys and values repeated) samples
    what the uncached reference and rows of mixed contexts sample."""
    model, _, _, sp = l2r
    ctx, n = [CONTEXTS[1]] * 6, [5, 7, 3, 7, 1, 7]
    fast = generate(model, ctx, n, gens(range(10, 16)), sp.eos, sp.pad, top_k=50)
    slow = generate(model, ctx, n, gens(range(10, 16)), sp.eos, sp.pad, top_k=50, use_cache=False)
    mixed = generate(model, [*ctx, CONTEXTS[0]], [*n, 4], gens([*range(10, 16), 1]), sp.eos, sp.pad, top_k=50)
    assert [g.tokens for g in fast] == [g.tokens for g in slow] == [g.tokens for g in mixed[:6]]
    for f, s in zip(fast, slow):
        assert f.logprob == pytest.approx(s.logprob, abs=1e-4)
    assert len({tuple(g.tokens) for g in fast}) > 1  # the rows drew different continuations


def test_sampling_does_not_depend_on_the_batch(l2r):
    model, _, _, sp = l2r
    together = generate(model, CONTEXTS, MAX_NEW, gens([5, 6, 7, 8]), sp.eos, sp.pad, top_k=20)
    for b in range(len(CONTEXTS)):
        alone = generate(model, [CONTEXTS[b]], [MAX_NEW[b]], gens([5 + b]), sp.eos, sp.pad, top_k=20)
        assert alone[0].tokens == together[b].tokens
    pairs = generate(model, CONTEXTS[2:], MAX_NEW[2:], gens([7, 8]), sp.eos, sp.pad, top_k=20)
    assert [g.tokens for g in pairs] == [g.tokens for g in together[2:]]


def test_generation_stops_at_eos(l2r):
    model, _, _, sp = l2r
    with torch.no_grad():
        favourite = int(model(input_ids=torch.tensor([[2, 20]])).logits[0, -1].argmax())
    out = generate(model, [[2, 20]], [10], gens([0]), eos=favourite, pad=sp.pad, top_k=1)
    assert out[0].tokens == [favourite] and out[0].logprob == 0.0  # top-1: q = 1


@pytest.mark.parametrize("k", [1, 3])
def test_top_k_never_leaves_the_top_k(l2r, k):
    model, _, _, sp = l2r
    out = generate(model, CONTEXTS, MAX_NEW, gens([11, 12, 13, 14]), sp.eos, sp.pad, top_k=k)
    with torch.no_grad():
        for ctx, g in zip(CONTEXTS, out):
            logits = model(input_ids=torch.tensor([ctx + g.tokens])).logits[0]  # (T, V)
            for t, tok in enumerate(g.tokens):
                step = logits[len(ctx) - 1 + t]  # (V,) predicts token t of the generation
                allowed = step.topk(k).indices.tolist()
                assert tok in allowed
                if k == 1:
                    assert tok == int(step.argmax())  # k = 1 is greedy


# ---------------------------------------------------------------- jobs and modes


def test_infill_context_has_mask_and_sep(models):
    model, tokenizer, meta = load_lm(models["infill"])
    sp = special_ids(tokenizer, meta)
    ids = tokenizer(sentence(0, 12), add_special_tokens=False)["input_ids"]
    spec = JobSpec(mode="infill", mask_ratio=0.4)
    job = make_job(spec, ids, (0, 0, 0), sp, meta, tokenizer)
    assert job.context[0] == sp.bos and job.context[-1] == sp.sep
    assert sp.mask in job.context and "<mask>" in job.context_text
    kept = [t for t in job.context[1:-1] if t != sp.mask]
    assert set(kept) <= set(ids) and len(kept) < len(ids)
    everything = make_job(JobSpec(mode="infill", mask_ratio=1.0), ids, (0, 0, 0), sp, meta, tokenizer)
    assert everything.context == [sp.bos, sp.mask, sp.sep]  # a masked run is one [mask]
    again = make_job(spec, ids, (0, 0, 0), sp, meta, tokenizer)
    other = make_job(spec, ids, (0, 1, 0), sp, meta, tokenizer)
    assert again.context == job.context and other.seed != job.seed  # masks and seeds per sample


def test_prefix_and_suffix_keep_their_context(models, data, tmp_path):
    cfg = dict(data=str(data), split="train", top_k=5, per_example=2, context_ratio=0.5, batch_size=3)
    pre = read_rows(sample_file(SampleConfig(model=str(models["l2r"]), out=str(tmp_path / "p.jsonl"),
                                             mode="prefix", **cfg)))
    suf = read_rows(sample_file(SampleConfig(model=str(models["r2l"]), out=str(tmp_path / "s.jsonl"),
                                             mode="suffix", **cfg)))
    for row in pre:
        kept = row["context"].split()
        assert kept and row["text"].split()[:len(kept)] == kept
    for row in suf:
        kept = row["context"].split()
        assert kept and row["text"].split()[-len(kept):] == kept
    src = {r["id"]: r["text"] for r in map(json.loads, (data / "train.jsonl").read_text().splitlines())}
    for row in suf:  # default: as many new tokens as were removed, fewer if [eos] came first
        assert len(row["text"].split()) <= len(src[row["source_id"]].split())


def test_suffix_needs_an_r2l_model(models, data, tmp_path):
    with pytest.raises(TextebmError, match="right-to-left"):
        sample_file(SampleConfig(model=str(models["l2r"]), data=str(data), out=str(tmp_path / "x.jsonl"),
                                 mode="suffix"))
    with pytest.raises(TextebmError, match="objective infill"):
        sample_file(SampleConfig(model=str(models["l2r"]), data=str(data), out=str(tmp_path / "x.jsonl"),
                                 mode="infill"))


def read_rows(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def assert_same_samples(a: list[dict], b: list[dict]) -> None:
    """Same rows and tokens; gen_logprob may differ by float rounding of other batch layouts."""
    assert [{k: v for k, v in r.items() if k != "gen_logprob"} for r in a] == \
           [{k: v for k, v in r.items() if k != "gen_logprob"} for r in b]
    assert [r["gen_logprob"] for r in a] == pytest.approx([r["gen_logprob"] for r in b], abs=1e-4)


# ---------------------------------------------------------------- the output file


def test_infill_rows_carry_everything(models, data, tmp_path):
    out = sample_file(SampleConfig(model=str(models["infill"]), data=str(data), out=str(tmp_path / "n.jsonl"),
                                   mode="infill", per_example=2, top_k=20, seed=3, max_new_tokens=8))
    rows = read_rows(out)
    assert [r["id"] for r in rows] == [f"s{i}-n{j}" for i in range(7) for j in range(2)]
    r = rows[0]
    assert r["source_id"] == "s0" and r["source_label"] == "neg" and r["mode"] == "infill"
    assert r["top_k"] == 20 and r["temperature"] == 1.0 and r["mask_ratio"] == 0.4 and r["seed"] == 3
    assert r["model"] == str(models["infill"].resolve())
    assert "<mask>" in "".join(x["context"] for x in rows)
    assert all(x["gen_logprob"] < 0 and 1 <= x["gen_tokens"] <= 8 for x in rows)
    assert not out.with_name(out.name + ".partial").exists()


def test_text_pairs_are_sampled_field_by_field(models, tmp_path):
    rows = [{"id": "a", "text": sentence(1, 5), "text_pair": sentence(2, 7), "label": "x"},
            {"id": "b", "text": sentence(3, 4), "text_pair": sentence(4, 3), "label": "y"}]
    data = write_data(tmp_path / "pairs.jsonl", rows)
    out = read_rows(sample_file(SampleConfig(model=str(models["l2r"]), data=str(data), out=str(tmp_path / "o.jsonl"),
                                             mode="prefix", context_tokens=2)))
    for src, row in zip(rows, out):
        assert row["text"].split()[:2] == src["text"].split()[:2]
        assert row["text_pair"].split()[:2] == src["text_pair"].split()[:2]
        assert row["context_pair"] == " ".join(src["text_pair"].split()[:2])


def test_same_seed_same_file_whatever_the_batch_size(models, data, tmp_path):
    outs = []
    for bs in (1, 5, 32):
        cfg = SampleConfig(model=str(models["l2r"]), data=str(data), out=str(tmp_path / f"b{bs}.jsonl"),
                           mode="prefix", per_example=2, top_k=10, max_new_tokens=6, batch_size=bs, seed=9,
                           limit=4, precision="fp32")  # bf16 rounding depends on the batch
        outs.append(read_rows(sample_file(cfg)))
    assert_same_samples(outs[0], outs[1])
    assert_same_samples(outs[0], outs[2])


def test_resume_after_an_interruption_gives_the_same_file(models, data, tmp_path, monkeypatch):
    def cfg(name):
        return SampleConfig(model=str(models["infill"]), data=str(data), out=str(tmp_path / name),
                            mode="infill", per_example=2, top_k=20, batch_size=3, seed=5, max_new_tokens=10,
                            precision="fp32")

    whole = (tmp_path / "whole.jsonl")
    sample_file(cfg("whole.jsonl"))

    real, calls = generate_module.generate, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(generate_module, "generate", flaky)
    with pytest.raises(KeyboardInterrupt):
        sample_file(cfg("resumed.jsonl"))
    partial = tmp_path / "resumed.jsonl.partial"
    written = partial.read_bytes()
    assert written.count(b"\n") >= 2 and not (tmp_path / "resumed.jsonl").exists()
    partial.write_bytes(written[:-15])  # a torn last line, as a crash mid-write leaves it
    monkeypatch.setattr(generate_module, "generate", real)
    sample_file(cfg("resumed.jsonl"))
    assert_same_samples(read_rows(tmp_path / "resumed.jsonl"), read_rows(whole))


def _interrupted_sample(monkeypatch, cfg: SampleConfig, batches: int) -> Path:
    """Run `lm sample` and interrupt it after `batches` batches; returns its .partial."""
    real, calls = generate_module.generate, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) > batches:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(generate_module, "generate", flaky)
    with pytest.raises(KeyboardInterrupt):
        sample_file(cfg)
    monkeypatch.undo()
    return Path(cfg.out + ".partial")


def test_resume_with_a_smaller_limit_writes_only_the_rows_asked_for(models, data, tmp_path, monkeypatch):
    """--limit and --per-example change which rows there are, not a row: a run interrupted with
    --limit 6 --per-example 2 resumes with --limit 2 --per-example 1 (it was refused, the .partial to
    be deleted), and writes the rows a fresh run with those options writes, to the byte."""
    def cfg(name, limit, per_example):
        return SampleConfig(model=str(models["l2r"]), data=str(data), out=str(tmp_path / name), mode="prefix",
                            per_example=per_example, max_new_tokens=4, batch_size=1, seed=3, limit=limit,
                            precision="fp32")

    partial = _interrupted_sample(monkeypatch, cfg("o.jsonl", 6, 2), 5)
    assert len(partial.read_text().splitlines()) == 1 + 5
    sample_file(cfg("o.jsonl", 2, 1))
    sample_file(cfg("fresh.jsonl", 2, 1))
    assert (tmp_path / "o.jsonl").read_bytes() == (tmp_path / "fresh.jsonl").read_bytes()
    rows = read_rows(tmp_path / "o.jsonl")
    assert len(rows) == 2 and all(r["id"].endswith("-n0") for r in rows)


def test_resume_refuses_other_settings(models, data, tmp_path, monkeypatch):
    out = tmp_path / "o.jsonl"
    partial = _interrupted_sample(monkeypatch, SampleConfig(model=str(models["l2r"]), data=str(data), out=str(out),
                                                            mode="free", max_new_tokens=3, batch_size=2), 1)
    before = partial.read_bytes()
    with pytest.raises(TextebmError, match="other settings .*top_k: 20 -> 7"):
        sample_file(SampleConfig(model=str(models["l2r"]), data=str(data), out=str(out), mode="free",
                                 max_new_tokens=3, top_k=7))
    assert partial.read_bytes() == before and not out.exists()


def test_resume_refuses_another_model_at_the_same_path(models, data, tmp_path, monkeypatch):
    """The .partial names the model by content: an LM replaced at the same path (same config, other
    weights) is another run, refused before any work, the partial left as it was."""
    model = make_tiny_lm(tmp_path / "lm", seed=3)
    out = tmp_path / "o.jsonl"
    cfg = SampleConfig(model=str(model), data=str(data), out=str(out), mode="prefix", max_new_tokens=3, batch_size=2,
                       precision="fp32")
    partial = _interrupted_sample(monkeypatch, cfg, 1)
    before = partial.read_bytes()
    make_tiny_lm(tmp_path / "lm", seed=4)
    with pytest.raises(TextebmError, match=f"{partial}: was written with other settings .*model_sha256"):
        sample_file(cfg)
    assert partial.read_bytes() == before and not out.exists()
    # Other source texts under the same ids are another run too.
    rows = [json.loads(x) for x in (data / "train.jsonl").read_text().splitlines()]
    other = write_data(tmp_path / "other" / "train.jsonl", [{**r, "text": r["text"] + " w1"} for r in rows]).parent
    make_tiny_lm(tmp_path / "lm", seed=3)
    with pytest.raises(TextebmError, match="data_sha256"):
        sample_file(SampleConfig(**{**cfg.__dict__, "data": str(other)}))
    sample_file(cfg)  # the same run continues
    assert out.is_file() and not partial.exists()


def test_resume_takes_the_same_model_moved_to_another_path(models, data, tmp_path, monkeypatch):
    """The model is compared by content: moved elsewhere, the interrupted run resumes (its header
    keeps the path it was first read from) and ends as an uninterrupted run's file."""
    model = make_tiny_lm(tmp_path / "lm", seed=3)
    cfg = lambda m, o: SampleConfig(model=str(m), data=str(data), out=str(tmp_path / o), mode="prefix",  # noqa: E731
                                    max_new_tokens=3, batch_size=2, precision="fp32")
    partial = _interrupted_sample(monkeypatch, cfg(model, "o.jsonl"), 1)
    assert partial.is_file()
    moved = (tmp_path / "lm").rename(tmp_path / "moved")
    sample_file(cfg(moved, "o.jsonl"))
    sample_file(cfg(moved, "whole.jsonl"))
    drop = lambda rows: [{k: v for k, v in r.items() if k != "model"} for r in rows]  # noqa: E731  where each row's model was read
    assert_same_samples(drop(read_rows(tmp_path / "o.jsonl")), drop(read_rows(tmp_path / "whole.jsonl")))


def test_overwrite_replaces_only_its_own_output(models, data, tmp_path):
    """--overwrite replaces a file `lm sample` wrote (its marker beside it), never the input, a
    file textebm did not write, nor one it wrote that the user changed since."""
    out = tmp_path / "o.jsonl"
    cfg = dict(model=str(models["l2r"]), data=str(data), mode="free", max_new_tokens=3, limit=2)
    sample_file(SampleConfig(**cfg, out=str(out)))
    first = out.read_bytes()
    sample_file(SampleConfig(**cfg, out=str(out), overwrite=True, seed=1))
    assert out.read_bytes() != first
    with pytest.raises(TextebmError, match="is the input of --data"):
        sample_file(SampleConfig(**{**cfg, "data": str(data / "train.jsonl")}, out=str(data / "train.jsonl"),
                                 overwrite=True))
    mine = tmp_path / "mine.jsonl"
    mine.write_text("my notes\n")
    with pytest.raises(TextebmError, match="not written by textebm"):
        sample_file(SampleConfig(**cfg, out=str(mine), overwrite=True))
    with open(out, "a") as f:
        f.write("an edit\n")
    with pytest.raises(TextebmError, match="has changed since"):
        sample_file(SampleConfig(**cfg, out=str(out), overwrite=True))
    assert mine.read_text() == "my notes\n" and out.read_text().endswith("an edit\n")


def test_read_partial_rewrites_a_torn_file_atomically(tmp_path, monkeypatch):
    """Dropping a torn last line rewrites the .partial through a temporary file: a crash before the
    rename leaves the old file, every finished sample in it, and no temporary file."""
    import textebm.io

    rows = [{"id": f"s{i}-n0", "text": sentence(i, 3)} for i in range(3)]
    good = "".join(json.dumps(r) + "\n" for r in rows).encode()
    partial = tmp_path / "o.jsonl.partial"
    partial.write_bytes(good + b'{"id": "s3-n0", "te')

    def crash(src, dst):
        raise OSError("power cut")

    monkeypatch.setattr(textebm.io.os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        io.read_partial(partial)
    assert partial.read_bytes() == good + b'{"id": "s3-n0", "te'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.jsonl.partial"]
    monkeypatch.undo()
    assert io.read_partial(partial) == rows
    assert partial.read_bytes() == good


def test_sample_top_k_of_log_probabilities_draws_the_same_tokens_in_their_own_precision():
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(64, 500, generator=g).log_softmax(-1)  # (64, 500) normalised, fp32
    u = torch.rand(64, generator=g, dtype=torch.float64)
    fast, fast_lq = sample_top_k(lp, 500, 1.0, u, log_probs=True)
    slow, slow_lq = sample_top_k(lp, 500, 1.0, u)  # the float64 re-normalised path
    assert torch.equal(fast, slow)  # no uniform falls within fp32 rounding of a boundary here
    torch.testing.assert_close(fast_lq, slow_lq, rtol=0, atol=1e-5)
    banned = torch.log(torch.tensor([[0.1, 0.0, 0.2, 0.7]]))  # token 1 at -inf
    assert [int(sample_top_k(banned, 4, 1.0, torch.tensor([u]), log_probs=True)[0])
            for u in (0.09, 0.11, 0.29, 0.31)] == [0, 2, 2, 3]
    with pytest.raises(ValueError, match="untruncated"):
        sample_top_k(lp, 10, 1.0, u, log_probs=True)
