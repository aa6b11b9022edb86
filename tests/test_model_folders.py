"""Model folders are checked by what they hold: a folder of the wrong kind (an encoder or a
classifier where a causal LM is expected, an LM where an encoder or classifier is), a broken
`classifier.json` or missing weights end the command with exit 2 and a message naming the folder,
what it holds and what was expected: no traceback, nothing written."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from test_lm_sampling import make_tiny_lm
from textebm.cli import main
from textebm.errors import InputError, TextebmError
from textebm.models.load import (CAUSAL_LM, CLASSIFIER, ENCODER, NONE, OTHER, find_model, folder_kind,
                                 inspect_folder, load_classifier, load_lm)


def _llama_base(path, tie: bool = False):
    """A LlamaModel (no LM head) with the tiny LM's tokenizer."""
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tie)
    LlamaModel(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def folders(classify_fixture, tmp_path_factory):
    from transformers import AutoTokenizer

    d = classify_fixture
    root = tmp_path_factory.mktemp("folders")
    lm = make_tiny_lm(root / "lm")
    clf = root / "clf-run"
    assert main(["classify", "train", "--data", str(d / "data"), "--encoder", str(d / "encoder"), "--out", str(clf),
                 "--max-steps", "1", "--batch-size", "16", "--precision", "fp32", "--eval-split", "",
                 "--no-progress"]) == 0
    f = {"lm": lm, "encoder": d / "encoder", "clf": clf, "data": d / "data", "root": root}

    f["lm-no-weights"] = root / "lm-no-weights"
    shutil.copytree(lm, f["lm-no-weights"])
    (f["lm-no-weights"] / "model.safetensors").unlink()

    f["llama-base"] = _llama_base(root / "llama-base")
    AutoTokenizer.from_pretrained(lm).save_pretrained(f["llama-base"])
    f["headless"] = root / "headless"  # says LlamaForCausalLM, holds a LlamaModel's weights
    shutil.copytree(f["llama-base"], f["headless"])
    cfg = json.loads((f["headless"] / "config.json").read_text())
    (f["headless"] / "config.json").write_text(json.dumps({**cfg, "architectures": ["LlamaForCausalLM"]}))

    for name, damage in [("clf-bad-json", lambda m: (m / "classifier.json").write_text('{"labels": ["a", ')),
                         ("clf-bad-spec", lambda m: (m / "classifier.json").write_text(
                             json.dumps({**json.loads((m / "classifier.json").read_text()), "energy": "magic"}))),
                         ("clf-no-weights", lambda m: (m / "model.safetensors").unlink())]:
        shutil.copytree(clf / "model", root / name)
        damage(root / name)
        f[name] = root / name
    return f


def test_folder_kinds(folders, tmp_path):
    assert folder_kind(folders["lm"]) == CAUSAL_LM
    assert folder_kind(folders["encoder"]) == ENCODER
    info = inspect_folder(folders["clf"])
    assert info.kind == CLASSIFIER and info.run == folders["clf"] and info.path == folders["clf"] / "model"
    assert info.describe() == "a textebm classifier (BertModel encoder)"
    assert folder_kind(folders["clf"] / "model") == CLASSIFIER
    assert folder_kind(folders["llama-base"]) == OTHER
    assert folder_kind(folders["headless"]) == CAUSAL_LM  # by its config; the weights check catches it
    assert folder_kind(tmp_path) == NONE
    (tmp_path / "config.json").write_text("{oops")
    with pytest.raises(InputError, match="config.json"):
        folder_kind(tmp_path)


def test_loaders_refuse_other_kinds(folders):
    with pytest.raises(TextebmError, match=r"a BertModel encoder, not a causal LM; expected a causal LM"):
        load_lm(folders["encoder"])
    with pytest.raises(TextebmError, match="weights do not fit.*lm_head"):
        load_lm(folders["headless"])
    with pytest.raises(TextebmError, match="a LlamaForCausalLM causal LM, not a textebm classifier"):
        load_classifier(folders["lm"])
    with pytest.raises(InputError, match=r"classifier.json.*'energy' must be one of none, scalar"):
        load_classifier(folders["clf-bad-spec"])
    assert find_model(folders["clf"], CLASSIFIER).path == folders["clf"] / "model"


def _score(f, model):
    return ["lm", "score", "--model", model, "--input", f["data"] / "test.jsonl", "--out", f["root"] / "out.jsonl"]


def _sample(f, model):
    return ["lm", "sample", "--model", model, "--data", f["data"], "--mode", "free", "--out", f["root"] / "out.jsonl"]


def _eval(f, model):
    return ["lm", "eval", "--model", model, "--data", f["data"], "--metrics", f["root"] / "out.json"]


def _clf_eval(f, model):
    return ["classify", "eval", "--model", model, "--data", f["data"], "--out", f["root"] / "report"]


def _clf_train(f, encoder):
    return ["classify", "train", "--data", f["data"], "--encoder", encoder, "--out", f["root"] / "new-run",
            "--max-steps", "1", "--no-progress"]


CASES = [  # (command, folder, what the message must say)
    (_score, "encoder", "a BertModel encoder, not a causal LM; expected a causal LM"),
    (_score, "clf", "a textebm classifier (BertModel encoder), not a causal LM"),
    (_score, "llama-base", "a LlamaModel (neither a causal LM with its head nor an encoder), not a causal LM"),
    (_score, "lm-no-weights", "no model weights (model.safetensors)"),
    (_score, "headless", "its weights do not fit its config.json (missing lm_head.weight)"),
    (_sample, "encoder", "a BertModel encoder, not a causal LM"),
    (_sample, "clf", "a textebm classifier"),
    (_eval, "encoder", "a BertModel encoder, not a causal LM"),
    (_clf_eval, "lm", "a LlamaForCausalLM causal LM, not a textebm classifier; expected a classifier"),
    (_clf_eval, "encoder", "a BertModel encoder, not a textebm classifier"),
    (_clf_eval, "clf-bad-json", "classifier.json: not a readable classifier description"),
    (_clf_eval, "clf-bad-spec", "classifier.json: 'energy' must be one of"),
    (_clf_eval, "clf-no-weights", "no model.safetensors"),
    (_clf_train, "lm", "a LlamaForCausalLM causal LM, not an encoder; expected a pretrained text encoder"),
    (_clf_train, "clf", "a textebm classifier (BertModel encoder), not an encoder"),
]


@pytest.mark.parametrize("build, folder, message", CASES,
                         ids=[f"{b.__name__[1:]}-{f}" for b, f, _ in CASES])
def test_wrong_folder_exits_2_names_it_and_writes_nothing(folders, capsys, build, folder, message):
    argv = [str(a) for a in build(folders, folders[folder])]
    before = sorted(p.name for p in folders["root"].iterdir())
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert str(folders[folder]) in err and "Traceback" not in err
    assert sorted(p.name for p in folders["root"].iterdir()) == before  # nothing written


def test_missing_model_names_what_would_work(folders, capsys):
    assert main([str(a) for a in _score(folders, folders["root"] / "no-such-model")]) == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err and "expected a causal LM" in err


def test_classifier_saved_with_a_pooler_still_loads(folders, tmp_path):
    """A classifier saved before poolers were dropped (MPNet's was kept) loads; the pooler is ignored."""
    from safetensors.torch import load_file, save_file

    model_dir = tmp_path / "model"
    shutil.copytree(folders["clf"] / "model", model_dir)
    state = load_file(str(model_dir / "model.safetensors"))
    state["encoder.pooler.dense.weight"] = torch.zeros(32, 32)
    state["encoder.pooler.dense.bias"] = torch.zeros(32)
    save_file(state, str(model_dir / "model.safetensors"))
    model, _ = load_classifier(model_dir)
    assert not any("pooler" in k for k in model.state_dict())


def test_each_textebm_kind_is_declared_beside_its_model_and_recognised_by_its_marker(tmp_path):
    """The kinds table: a folder holding only a kind's marker (and weights) is that kind; the
    message names it with the kind's own noun."""
    from textebm.models.load import MARKED, inspect_folder

    assert set(MARKED) == {"classifier", "cloze", "energy", "residual-lm", "tagger", "image-net"}
    for kind in MARKED.values():
        folder = tmp_path / kind.name
        folder.mkdir()
        (folder / kind.marker).write_text("{}")
        if kind.shows_encoder:  # a classifier keeps its encoder's config.json beside its marker
            assert inspect_folder(folder).kind == NONE
            (folder / "config.json").write_text('{"architectures": ["BertModel"], "model_type": "bert"}')
        info = inspect_folder(folder)
        assert info.kind == kind.name and info.describe().startswith(kind.noun)
        run = tmp_path / f"run-{kind.name}"
        (run / "model").mkdir(parents=True)
        for f in folder.iterdir():
            (run / "model" / f.name).write_text(f.read_text())
        assert inspect_folder(run).path == run / "model"
