"""Paper e's semi-supervised taggers (`tag train --method pretrain | joint`): the DNCE step on the
JRF's marginal against enumeration of every tag sequence, the joint weight's ramp, the start from a
supervised tagger, both methods end to end on a tiny synthetic corpus (stage 2's BiLSTM frozen
byte for byte), resume of each equal to an uninterrupted run, and bad inputs."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_tagging import _train as supervised_args
from test_tagging import tagged  # noqa: F401  (the module fixture: a tiny tagged dataset)

from textebm.cli import main
from textebm.models.crf import BiLSTMCRF, TaggerSpec
from textebm.models.noise_lm import NoiseLM
from textebm.models.trf import TRFHead, length_distribution
from textebm.tagging.recipes import transfer_tagger
from textebm.tagging.ssl import (
    DNCESpec,
    SemiSupervisedTagger,
    dnce_step,
    estimate_zeta,
    ramp_weight,
)
from textebm.tagging.vocab import build_vocab


def _args(method, data, out, *extra, sizes: bool = True) -> list[str]:
    """A tiny run: 40 labelled sentences of the 160; semi-supervised, U/L = 2 (80 unlabelled)."""
    args = ["tag", "train", "--method", method, "--data", str(data), "--out", str(out), "--batch-size", "8",
            "--min-count", "1", "--labelled", "40", "--precision", "fp32", "--no-progress", "--threads", "1"]
    if sizes:
        args += ["--embed", "16", "--hidden", "16"]
    if method != "supervised":
        args += ["--noise-embed", "16", "--noise-hidden", "16", "--ratio", "2"]
    return args + [str(a) for a in extra]


PRETRAIN = ("--pretrain-epochs", "1", "--pretrain-lr", "0.01", "--epochs", "4", "--lr", "0.05")
JOINT = ("--epochs", "2", "--lr", "0.02", "--ramp-steps", "5", "--unlabelled-weight", "0.1", "--log-every", "1")


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def _majority(data: Path) -> float:
    dev = [json.loads(line) for line in (data / "dev.jsonl").read_text().splitlines()]
    counts = Counter(t for r in dev for t in r["tags"])
    return counts.most_common(1)[0][1] / sum(counts.values())


# ---------------------------------------------------------------- the pieces


def test_dnce_step_on_the_jrf_marginal_matches_enumeration():
    """One DNCE step of the JRF (α = 0.5, ν = 1: 3 real sentences, 3 noise ones mixed into the data
    side, 6 on the noise side) against the loss written out in floats, each log p from u(x) = log
    Σ_y exp u(x, y) over every tag sequence y, and the noise LM's own loss."""
    torch.manual_seed(0)
    V, K = 5, 3
    pi = length_distribution([1, 2, 3, 3], 3)
    tagger = BiLSTMCRF(TaggerSpec(vocab_size=V, tags=["A", "B", "C"], embed=4, hidden=3)).double()
    with torch.no_grad():
        tagger.transitions.copy_(torch.randn(K, K, dtype=torch.float64))
    head = TRFHead(V, None, pi).double()
    with torch.no_grad():
        head.zeta.copy_(torch.tensor([0.0, 1.3, 2.9, 4.1], dtype=torch.float64))
    noise = NoiseLM(V, pi, embed=4, hidden=5).double()
    model = SemiSupervisedTagger(tagger, head, noise)
    ids = torch.tensor([[1, 2, 3], [4, 2, 0], [3, 0, 0]])
    mask = ids != 0
    alpha, nu = 0.5, 1.0
    got = dnce_step(model.joint_log_density, noise, ids, mask, DNCESpec(alpha, nu), torch.Generator().manual_seed(7))
    x_n, m_n, log_q_n = noise.sample(9, generator=torch.Generator().manual_seed(7))  # the same draws

    @torch.no_grad()
    def log_p(sentence: list[int]) -> float:
        x = torch.tensor([sentence])
        phi = tagger.potentials(x, torch.ones_like(x, dtype=torch.bool))[0]  # (l, K)
        scores = [sum(float(phi[t, y[t]]) for t in range(len(y))) + sum(float(tagger.transitions[a, b])
                                                                        for a, b in itertools.pairwise(y))
                  for y in itertools.product(range(K), repeat=len(sentence))]
        u = math.log(sum(math.exp(s) for s in scores))
        n = len(sentence)
        return u - float(head.zeta[n]) + math.log(float(pi[n]))

    real = [[1, 2, 3], [4, 2], [3]]
    drawn = [x_n[i, :int(m_n[i].sum())].tolist() for i in range(9)]
    lq_real = [float(noise.log_prob(torch.tensor([s]), torch.ones(1, len(s), dtype=torch.bool)).detach()) for s in real]
    samples = [(s, lq, True) for s, lq in zip(real, lq_real)]
    samples += [(s, float(lq), i < 3) for i, (s, lq) in enumerate(zip(drawn, log_q_n))]  # 3 mixed in, 6 noise
    total = 0.0
    for s, lq, data_side in samples:
        r = alpha * math.exp(log_p(s)) + (1 - alpha) * math.exp(lq)
        p_data = r / (r + nu * math.exp(lq))
        total += -math.log(p_data) if data_side else -math.log(1 - p_data)
    assert got.n_noise == 9
    assert float(got.dnce.detach()) == pytest.approx(total / 6, rel=1e-9)
    assert float(got.noise_nll.detach()) == pytest.approx(-sum(lq_real) / 6, rel=1e-9)
    # the DNCE part trains the tagger and ζ, never the noise LM
    got.dnce.backward()
    assert tagger.lstm.weight_hh_l0.grad.abs().sum() > 0 and tagger.transitions.grad.abs().sum() > 0
    assert head.zeta.grad.abs().sum() > 0
    assert all(p.grad is None for p in noise.parameters())


def test_the_starting_zeta_estimates_log_z_per_length():
    """estimate_zeta against log Σ_x exp u(x) over every sentence of the 4 words (id 0 is padding)
    of lengths 1..3, u the JRF's marginal of a random tagger; lengths π never gives keep l·log 4."""
    torch.manual_seed(2)
    tagger = BiLSTMCRF(TaggerSpec(vocab_size=5, tags=["A", "B"], embed=3, hidden=2)).double()
    pi = torch.tensor([0, 0.5, 0, 0.5], dtype=torch.float64)  # no sentence of length 2
    u = lambda ids, m: TRFHead.marginal_potential(tagger, ids, m)
    got = estimate_zeta(u, pi, 5, 0, n=4000, generator=torch.Generator().manual_seed(0))
    for n in (1, 3):
        every = torch.tensor(list(itertools.product(range(1, 5), repeat=n)))  # (4^n, n)
        with torch.no_grad():
            want = float(torch.logsumexp(u(every, torch.ones_like(every, dtype=torch.bool)), 0))
        assert float(got[n]) == pytest.approx(want, abs=0.02), n
    assert float(got[2]) == pytest.approx(2 * math.log(4)) and float(got[0]) == 0.0
    zero = estimate_zeta(lambda ids, m: torch.zeros(ids.shape[0]), pi, 5, 2, n=3)
    torch.testing.assert_close(zero, torch.arange(4, dtype=torch.float32) * math.log(4))


def test_zeta_by_importance_sampling_from_the_noise_lm_matches_brute_force():
    """estimate_zeta with the noise LM as proposal (log Z_l = log E_q(x|l) exp(u - log q(x|l)))
    against the enumeration, on the same tiny case; the draws come at the asked lengths and their
    log q is the noise LM's log_prob."""
    torch.manual_seed(3)
    tagger = BiLSTMCRF(TaggerSpec(vocab_size=5, tags=["A", "B"], embed=3, hidden=2)).double()
    pi = torch.tensor([0, 0.5, 0, 0.5], dtype=torch.float64)
    noise = NoiseLM(5, pi, embed=3, hidden=4, pad_id=0).double()
    ids, mask, log_q = noise.sample(6, generator=torch.Generator().manual_seed(1), lengths=torch.full((6,), 3))
    assert mask.sum(1).tolist() == [3] * 6 and (ids != 0).all()
    torch.testing.assert_close(log_q, noise.log_prob(ids, mask))
    u = lambda ids, m: TRFHead.marginal_potential(tagger, ids, m)
    got = estimate_zeta(u, pi, 5, 0, n=4000, generator=torch.Generator().manual_seed(0), proposal=noise)
    for n in (1, 3):
        every = torch.tensor(list(itertools.product(range(1, 5), repeat=n)))  # (4^n, n)
        with torch.no_grad():
            want = float(torch.logsumexp(u(every, torch.ones_like(every, dtype=torch.bool)), 0))
        assert float(got[n]) == pytest.approx(want, abs=0.02), n
    assert float(got[2]) == pytest.approx(2 * math.log(4))


def test_the_unlabelled_weight_ramps_as_the_papers_code():
    assert ramp_weight(0, 0.1, 40000) == 0.0
    assert ramp_weight(10000, 0.1, 40000) == pytest.approx(0.05)
    assert ramp_weight(40000, 0.1, 40000) == pytest.approx(0.1)
    assert ramp_weight(90000, 0.1, 40000) == pytest.approx(0.1)
    assert ramp_weight(4, 0.2, 16) == pytest.approx(0.1)
    assert ramp_weight(0, 0.1, 0) == 0.1  # no ramp


def test_a_tagger_moved_to_a_larger_vocabulary_tags_as_before():
    torch.manual_seed(1)
    rows = [{"tokens": ["the", "dog", "runs"]}, {"tokens": ["the", "cat", "runs"]}]
    small = build_vocab(rows, min_count=2)  # the, runs
    big = build_vocab(rows + [{"tokens": ["a", "dog", "sits"]}], min_count=1)
    init = BiLSTMCRF(TaggerSpec(vocab_size=len(small), tags=["D", "N", "V"], embed=4, hidden=3))
    with torch.no_grad():
        init.transitions.copy_(torch.randn(3, 3))
    moved = transfer_tagger(init, small, big, dropout=0.0)
    sent = ["the", "fox", "sits", "a", "runs", "dog"]  # "sits", "a", "dog": known to big only
    a = init.potentials(torch.tensor([small.encode(sent)]), torch.ones(1, 6, dtype=torch.bool))
    b = moved.potentials(torch.tensor([big.encode(sent)]), torch.ones(1, 6, dtype=torch.bool))
    assert big.encode(sent) != small.encode(sent) and moved.spec.vocab_size == len(big)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert torch.equal(moved.transitions, init.transitions)


# ---------------------------------------------------------------- the commands end to end


@pytest.fixture(scope="module")
def pretrained(tagged, tmp_path_factory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("jrf") / "pre"
    assert main(_args("pretrain", tagged, out, *PRETRAIN)) == 0
    return out


def test_pretrain_fine_tunes_every_weight_and_tag_eval_reads_it(tagged, pretrained, tmp_path):  # noqa: F811
    metrics = json.loads((pretrained / "metrics.json").read_text())
    acc = metrics["eval"]["dev_accuracy"]
    assert acc > _majority(tagged) + 0.3, acc
    stage1 = json.loads((pretrained / "pretrain" / "metrics.json").read_text())
    assert stage1["completed"] and {"dnce", "noise_nll"} <= set(stage1["train"]["history"][-1])
    config = json.loads((pretrained / "config.json").read_text())
    assert (config["labelled_sentences"], config["unlabelled_sentences"]) == (40, 80)
    # stage 2 started from stage 1's embeddings and BiLSTM and fine-tuned every weight (the paper's code)
    first, final = _weights(pretrained / "pretrain" / "model"), _weights(pretrained / "model")
    assert set(final) == set(first)
    assert all(not torch.equal(first[k], final[k]) for k in final), [k for k in final if torch.equal(first[k], final[k])]
    assert config["freeze"] is False
    assert (pretrained / "pretrain" / "model" / "trf.safetensors").is_file()
    out = tmp_path / "dev.json"
    assert main(["tag", "eval", "--model", str(pretrained), "--data", str(tagged), "--split", "dev",
                 "--out", str(out)]) == 0
    assert json.loads(out.read_text())["dev_accuracy"] == pytest.approx(acc, abs=1e-12)
    # stage 1's folder holds a tagger whose output layer and A were never trained: not a tagger to use
    for stage1 in (pretrained / "pretrain", pretrained / "pretrain" / "model"):
        assert main(["tag", "eval", "--model", str(stage1), "--data", str(tagged), "--out", str(tmp_path / "x.json")]) == 2
        assert main(_args("joint", tagged, tmp_path / "j", *JOINT, "--init", stage1, sizes=False)) == 2
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "j").exists()


def test_joint_from_a_supervised_tagger_learns_and_tag_predict_reads_it(tagged, tmp_path):  # noqa: F811
    sup = tmp_path / "sup"
    assert main(supervised_args(tagged, sup, "--labelled", "40", "--max-steps", "20", "--threads", "1")) == 0
    joint = tmp_path / "joint"
    assert main(_args("joint", tagged, joint, *JOINT, "--init", sup)) == 2  # --embed, --hidden: init's
    assert not joint.exists()
    assert main(_args("joint", tagged, joint, *JOINT, "--init", sup, sizes=False)) == 0
    metrics = json.loads((joint / "metrics.json").read_text())
    history = metrics["train"]["history"]
    assert metrics["eval"]["dev_accuracy"] > _majority(tagged) + 0.3, metrics["eval"]
    assert history[-1]["weight"] == pytest.approx(0.1) and "crf_nll" in history[-1]
    assert metrics["train"]["steps"] == 20  # 2 epochs of 80 unlabelled sentences in batches of 8: the main stream
    pred = tmp_path / "p.conll"
    assert main(["tag", "predict", "--model", str(joint), "--input", str(tagged / "dev.jsonl"),
                 "--out", str(pred)]) == 0
    assert pred.read_text().count("\n\n") == 40


@pytest.mark.parametrize("method", ["pretrain", "joint"])
def test_resume_after_interruptions_equals_an_uninterrupted_run(tagged, tmp_path, monkeypatch, capsys,  # noqa: F811
                                                                method):
    from kill_at_step import stop_after

    from textebm.tagging import recipes

    extra = (("--pretrain-steps", "9", "--max-steps", "9", "--pretrain-epochs", "1", "--epochs", "3")
             if method == "pretrain" else ("--max-steps", "9", "--ramp-steps", "4", "--dropout", "0.2"))
    args = (*extra, "--checkpoint-every", "4")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(_args(method, tagged, whole, *args)) == 0

    # pretrain: stopped in stage 1, then in stage 2; joint: stopped once
    stages = [recipes.TRFRecipe, recipes.TaggerRecipe] if method == "pretrain" else [recipes.TaggerJointRecipe]
    for i, recipe in enumerate(stages):
        stop_after(6, recipe, monkeypatch)
        capsys.readouterr()
        assert main([*_args(method, tagged, cut, *args), *(["--resume"] if i else [])]) == 130
        monkeypatch.undo()
        if recipe is recipes.TRFRecipe:  # said for the user's --out, not for stage 1's folder
            assert (f"--out {cut}: stopped in stage 1 (the TRF language model); its progress is kept in "
                    f"{cut / 'pretrain'}; run the same command with --resume") in capsys.readouterr().err
    assert main([*_args(method, tagged, cut, *args), "--resume"]) == 0
    if method == "pretrain":  # with --stage1-cache: the run's folder held nothing yet, the cache resumes by content
        cached, cache = tmp_path / "cached", tmp_path / "cache"
        stop_after(6, recipes.TRFRecipe, monkeypatch)
        capsys.readouterr()
        assert main([*_args(method, tagged, cached, *args, "--stage1-cache", str(cache))]) == 130
        monkeypatch.undo()
        err = capsys.readouterr().err
        assert f"--out {cached}: stopped in stage 1" in err and "--stage1-cache" in err and "--resume" not in err
        assert main([*_args(method, tagged, cached, *args, "--stage1-cache", str(cache))]) == 0
        a, b = _weights(whole / "model"), _weights(cached / "model")
        assert all(torch.equal(a[k], b[k]) for k in a)
    folders = ["model", "pretrain/model"] if method == "pretrain" else ["model"]
    for f in folders:
        a, b = _weights(whole / f), _weights(cut / f)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f
    ma, mb = (json.loads((r / "metrics.json").read_text())["eval"] for r in (whole, cut))
    if method == "pretrain":  # each names the folder of its own stage 1
        assert (ma.pop("stage1"), mb.pop("stage1")) == (str(whole / "pretrain"), str(cut / "pretrain"))
    assert ma == mb


# ---------------------------------------------------------------- bad inputs: exit 2, nothing written


BAD = [
    ("U/L larger than the pool", ("pretrain", "--ratio", "4"),
     "--ratio 4: U/L = 4 with 40 labelled sentences needs 160"),
    ("no pool without --labelled", ("joint", "--labelled", "0", "--ratio", "1"),
     "(too few for any --ratio: give --labelled N below the training split's"),
    ("a semi-supervised option under supervised", ("supervised", "--noise-ratio", "2"),
     "--noise-ratio has no effect with --method supervised"),
    ("a joint option under pretrain", ("pretrain", "--ramp-steps", "3"),
     "--ramp-steps has no effect with --method pretrain"),
    ("a pretrain option under joint", ("joint", "--pretrain-lr", "0.1"),
     "--pretrain-lr has no effect with --method joint unless --from-pretrained"),
    ("--freeze under joint", ("joint", "--freeze", "--from-pretrained"), "--freeze has no effect with --method joint"),
    ("--from-pretrained under pretrain", ("pretrain", "--from-pretrained"),
     "--from-pretrained has no effect with --method pretrain"),
    ("--from-pretrained with --init", ("joint", "--from-pretrained", "--init", "NOWHERE"),
     "--from-pretrained and --init"),
    ("sizes with --init", ("joint", "--init", "NOWHERE"), "--embed, --hidden have no effect with --init"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_inputs_exit_2_naming_the_option_and_write_nothing(tagged, tmp_path, case, capsys):  # noqa: F811
    _, (method, *extra), expected = case
    before = sorted(tmp_path.rglob("*")), sorted(tagged.rglob("*"))
    capsys.readouterr()
    assert main(_args(method, tagged, tmp_path / "o", *extra)) == 2, case[0]
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
    assert (sorted(tmp_path.rglob("*")), sorted(tagged.rglob("*"))) == before


def test_a_stage1_cache_that_is_a_file_is_refused_before_anything_is_read(tagged, tmp_path, capsys):  # noqa: F811
    mine = tmp_path / "notes.txt"
    mine.write_text("mine")
    capsys.readouterr()
    assert main(_args("pretrain", tagged, tmp_path / "o", "--stage1-cache", mine)) == 2
    err = capsys.readouterr().err
    assert f"--stage1-cache {mine}: not a folder" in err and "Traceback" not in err
    assert mine.read_text() == "mine" and not (tmp_path / "o").exists()


def test_init_must_be_a_tagger_with_the_training_tags(tagged, tmp_path, capsys):  # noqa: F811
    clf = tmp_path / "clf" / "model"
    clf.mkdir(parents=True)
    (clf / "classifier.json").write_text("{}")
    capsys.readouterr()
    assert main(_args("joint", tagged, tmp_path / "o", "--init", tmp_path / "clf", sizes=False)) == 2
    assert "--init" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_pretrain_draws_its_pool_from_other_corpora_too(tagged, tmp_path):  # noqa: F811
    """--unlabelled: the text of another corpus joins the pool (U/L 4 needs more than the 120 pool
    sentences of the training split), and its words enter the vocabulary."""
    from textebm.data.layout import write_dataset
    from textebm.tagging.vocab import VOCAB_FILE

    write_dataset(tmp_path / "text", {s: [{"text": f"Zebra number {i} grazed near Nairobi."} for i in range(n)]
                                      for s, n in (("train", 60), ("dev", 5), ("test", 5))}, {"name": "toy-text"})
    out = tmp_path / "pre"
    assert main(_args("pretrain", tagged, out, "--pretrain-steps", "2", "--max-steps", "2") + ["--ratio", "4"]) == 2
    assert not out.exists()  # 160 labelled needed, 120 in the pool
    assert main(_args("pretrain", tagged, out, "--pretrain-steps", "2", "--max-steps", "2", "--ratio", "4",
                      "--unlabelled", tmp_path / "text")) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["unlabelled_sentences"] == 160
    words = json.loads((out / "model" / VOCAB_FILE).read_text())
    assert "Zebra" in str(words) and "Nairobi" in str(words)


def test_keep_best_ends_with_the_epoch_of_best_dev_accuracy(tagged, tmp_path):  # noqa: F811
    out = tmp_path / "best"
    assert main(supervised_args(tagged, out, "--labelled", "8", "--epochs", "6", "--lr", "0.05", "--keep-best",
                                "--threads", "1")) == 0
    m = json.loads((out / "metrics.json").read_text())
    val = m["train"]["validation"]  # after each of the 6 epochs (the last one after the last step)
    by_epoch = m["eval"]["dev_accuracy_by_epoch"][:-1]  # end_epoch's, epochs 1-5
    assert len(val) == 6 and [1 - v["loss"] for v in val[:5]] == pytest.approx(by_epoch, abs=1e-12)
    assert len({round(a, 6) for a in by_epoch}) > 1  # the accuracy moved: the choice is not a tie
    kept = min(val, key=lambda v: v["loss"])
    assert m["train"]["kept"] == kept and m["eval"]["dev_accuracy"] == pytest.approx(1 - kept["loss"], abs=1e-12)
    # the last step's weights are kept beside as RUN/last when an earlier epoch was better
    assert (out / "last").is_dir() == (kept is not val[-1])
    if kept is not val[-1]:
        assert main(["tag", "eval", "--model", str(out / "last"), "--data", str(tagged), "--split", "dev",
                     "--out", str(tmp_path / "last.json")]) == 0
        last = json.loads((tmp_path / "last.json").read_text())["dev_accuracy"]
        assert last == pytest.approx(1 - val[-1]["loss"], abs=1e-12) and last < m["eval"]["dev_accuracy"]
    assert main(supervised_args(tagged, tmp_path / "x", "--keep-best", "--eval-split", "")) == 2
    assert not (tmp_path / "x").exists()


def test_pretrain_freeze_keeps_stage_1s_network_and_trains_the_head_only(tagged, tmp_path):  # noqa: F811
    """--freeze, the ablation: the embeddings and the BiLSTM byte for byte as stage 1 left them; the
    output layer and A learn. Refused with another method."""
    run = tmp_path / "frozen"
    assert main(_args("pretrain", tagged, run, *PRETRAIN, "--freeze")) == 0
    first, final = _weights(run / "pretrain" / "model"), _weights(run / "model")
    frozen = [k for k in final if k.startswith(("embed.", "lstm."))]
    assert frozen and all(torch.equal(first[k], final[k]) for k in frozen)
    assert not torch.equal(first["out.weight"], final["out.weight"])
    assert json.loads((run / "config.json").read_text())["freeze"] is True
    assert main(_args("joint", tagged, tmp_path / "j", *JOINT, "--freeze")) == 2
    assert not (tmp_path / "j").exists()


def test_stage2_labelled_words_keeps_the_supervised_vocabulary_with_stage_1s_vectors(tagged, tmp_path):  # noqa: F811
    """--stage2-words labelled: stage 2's tagger holds the words of the labelled sentences (the
    supervised tagger's vocabulary), each with its stage-1 vector (--freeze: still byte for byte at
    the end); a word only the unlabelled pool has reads as the unknown word. Without --freeze it
    learns; with another method the option is refused."""
    import shutil

    from textebm.tagging.folder import load_tagging_model

    data = tmp_path / "data"  # `tagged` with a new noun in each training sentence, seen once: in the pool or not
    shutil.copytree(tagged, data)
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    for i, r in enumerate(rows):
        r["tokens"][1] = f"zorb{i}"
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run, sup = tmp_path / "lab", tmp_path / "sup"
    assert main(_args("pretrain", data, run, *PRETRAIN, "--freeze", "--stage2-words", "labelled")) == 0
    assert main(_args("supervised", data, sup, "--epochs", "1")) == 0
    from textebm.tagging.vocab import load_vocab
    stage1_vocab = load_vocab(run / "pretrain" / "model")  # stage 1's tagger is no tagger to load
    tagger, vocab, _ = load_tagging_model(run, "cpu")
    assert vocab.words == load_tagging_model(sup, "cpu")[1].words
    pool_only = [w for w in stage1_vocab.words if w not in vocab.index]
    assert pool_only and vocab.encode(pool_only[:3]) == [vocab.unk_id] * 3
    first = _weights(run / "pretrain" / "model")["embed.weight"]
    for w in vocab.words[2:]:  # after padding and the unknown word
        assert torch.equal(tagger.embed.weight[vocab.index[w]], first[stage1_vocab.index[w]]), w
    assert torch.equal(tagger.embed.weight[vocab.unk_id], first[stage1_vocab.unk_id])
    assert json.loads((run / "config.json").read_text())["stage2_words"] == "labelled"
    free = tmp_path / "free"
    assert main(_args("pretrain", data, free, *PRETRAIN, "--stage2-words", "labelled")) == 0
    m = json.loads((free / "metrics.json").read_text())
    assert m["eval"]["dev_accuracy"] > _majority(tagged) + 0.3, m["eval"]
    assert main(_args("joint", tagged, tmp_path / "j", *JOINT, "--stage2-words", "labelled")) == 2
    assert not (tmp_path / "j").exists()


def test_a_stage1_cache_is_shared_by_content_and_refused_for_other_inputs(tagged, tmp_path, capsys,  # noqa: F811
                                                                         caplog):
    """--stage1-cache: pre-training, its frozen ablation and joint --from-pretrained of the same pool
    share one stage 1 (trained once, then reused unchanged); another pool gets its own; a cached
    stage 1 whose recorded inputs differ from its name's is refused (exit 2, the run not started)."""
    cache = tmp_path / "stage1"
    assert main(_args("pretrain", tagged, tmp_path / "pre", *PRETRAIN, "--stage1-cache", cache)) == 0
    stages = lambda: [p for p in cache.glob("trf-*") if p.is_dir()]  # noqa: E731  (beside each, its .lock)
    (trf,) = stages()
    stamp = {p: p.stat().st_mtime_ns for p in trf.rglob("*")}
    assert not (tmp_path / "pre" / "pretrain").exists()
    assert main(_args("pretrain", tagged, tmp_path / "frozen", *PRETRAIN, "--stage1-cache", cache, "--freeze")) == 0
    caplog.set_level("INFO", logger="textebm")
    caplog.clear()
    assert main(_args("joint", tagged, tmp_path / "joint", *JOINT, "--from-pretrained", "--stage1-cache", cache,
                      "--pretrain-epochs", "1", "--pretrain-lr", "0.01")) == 0
    assert "reusing" in caplog.text and "joint training from stage 1" in caplog.text
    assert stages() == [trf] and {p: p.stat().st_mtime_ns for p in trf.rglob("*")} == stamp
    # both started from the shared stage 1's encoder: the frozen one kept it byte for byte
    first, frozen = _weights(trf / "model"), _weights(tmp_path / "frozen" / "model")
    assert all(torch.equal(first[k], frozen[k]) for k in first if k.startswith(("embed.", "lstm.")))
    joint = json.loads((tmp_path / "joint" / "metrics.json").read_text())
    assert joint["eval"]["dev_accuracy"] > _majority(tagged) + 0.3, joint["eval"]
    # another pool (another labelled draw) trains a stage 1 of its own
    assert main(_args("pretrain", tagged, tmp_path / "other", *PRETRAIN, "--stage1-cache", cache,
                      "--split-seed", "1")) == 0
    assert len(stages()) == 2
    # a cached stage 1 that records other inputs than its name says is refused
    config = json.loads((trf / "config.json").read_text())
    (trf / "config.json").write_text(json.dumps({**config, "vocab_sha256": "0" * 64}))
    capsys.readouterr()
    assert main(_args("pretrain", tagged, tmp_path / "again", *PRETRAIN, "--stage1-cache", cache)) == 2
    err = capsys.readouterr().err
    assert "--stage1-cache" in err and "vocab_sha256" in err and "Traceback" not in err, err
    assert not (tmp_path / "again").exists()


def test_a_pretrain_run_from_before_freeze_resumes_frozen(tagged, tmp_path, monkeypatch):  # noqa: F811
    """A run whose config.json has no `freeze` started with the BiLSTM frozen; --resume keeps it so."""
    from textebm.tagging.train import TagTrainConfig, stage2_frozen

    run = tmp_path / "old"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"method": "pretrain", "data": str(tagged)}))
    cfg = TagTrainConfig(data=str(tagged), out=str(run), method="pretrain", resume=True)
    assert stage2_frozen(cfg) == (True, True)
    cfg_freeze = TagTrainConfig(data=str(tagged), out=str(run), method="pretrain", resume=True, freeze=True)
    assert stage2_frozen(cfg_freeze) == (True, True)  # --freeze on such a run: the same, not a changed setting
    (run / "config.json").write_text(json.dumps({"method": "pretrain", "freeze": False}))
    assert stage2_frozen(cfg) == (False, False)
    assert stage2_frozen(TagTrainConfig(data=str(tagged), out=str(tmp_path / "new"), method="pretrain")) == (False,
                                                                                                            False)


def test_zeta_trains_in_its_own_parameter_group_at_its_own_rate():
    from textebm.tagging.recipes import trf_groups
    from textebm.tagging.ssl import SemiSupervisedTagger
    from textebm.train import make_optimizer, TrainOptions

    tagger = BiLSTMCRF(TaggerSpec(vocab_size=6, tags=["A", "B"], embed=4, hidden=3))
    pi = length_distribution([1, 2, 3], 3)
    model = SemiSupervisedTagger(tagger, TRFHead(6, 3, pi), NoiseLM(6, pi, embed=4, hidden=3))
    opt = make_optimizer(model, TrainOptions(out="-", lr=1e-3), trf_groups(noise_lr=2e-3, zeta_lr=0.05))
    where = {id(p): g for g in opt.param_groups for p in g["params"]}
    zeta = where[id(model.trf.zeta)]
    assert zeta["name"] == "zeta" and zeta["lr"] == 0.05 and zeta["weight_decay"] == 0.0
    assert [p for p in zeta["params"]] == [model.trf.zeta]  # nothing else at ζ's rate
    others = [p for n, p in model.trf.named_parameters() if n != "zeta"]  # the output embeddings
    assert others and all(where[id(p)]["name"] == "" for p in others)
    opt = make_optimizer(model, TrainOptions(out="-", lr=1e-3), trf_groups(noise_lr=2e-3, zeta_lr=0.0))
    assert {id(p): g for g in opt.param_groups for p in g["params"]}[id(model.trf.zeta)]["name"] == ""
