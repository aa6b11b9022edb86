"""Examples and noise: one id rule for data without ids, a warning when noise would be reused."""

from __future__ import annotations

import json
import logging

from test_lm_sampling import make_tiny_lm
from textebm.classify.data import Encoded, attach_noise, warn_noise_reuse
from textebm.cli import main


def _ex(n_noise: int, i: int) -> Encoded:
    return Encoded(ids=[1, 2], type_ids=None, label=0, noise=list(range(n_noise)), index=i)


def test_noise_reuse_warns_with_the_number_to_sample(caplog):
    with caplog.at_level(logging.WARNING, logger="textebm.classify.data"):
        assert warn_noise_reuse([_ex(6, 0), _ex(6, 1)], k=2, epochs=3, noise_path="n.jsonl") == 0
        assert caplog.text == ""
        assert warn_noise_reuse([_ex(6, 0), _ex(4, 1), _ex(1, 2)], k=2, epochs=2.5, noise_path="n.jsonl") == 2
    assert "2 of 3 training examples" in caplog.text and "--per-example 6" in caplog.text
    assert "within an epoch" in caplog.text  # one example has 1 < K samples


def test_noise_from_data_without_ids_matches_its_examples(tmp_path, classify_fixture, capsys):
    """`lm sample` names the sources of a file without ids by row index; `classify train` finds them."""
    rows = [json.loads(line) for line in (classify_fixture / "data" / "train.jsonl").read_text().splitlines()]
    data = tmp_path / "noids"
    data.mkdir()
    for split in ("train", "dev"):
        with open(data / f"{split}.jsonl", "w") as f:
            for r in rows[:24]:
                f.write(json.dumps({"text": r["text"], "label": r["label"]}) + "\n")
    lm = make_tiny_lm(tmp_path / "lm", objective="infill")
    noise = tmp_path / "noise.jsonl"
    assert main(["lm", "sample", "--model", str(lm), "--data", str(data), "--mode", "infill", "--out", str(noise),
                 "--max-new-tokens", "4", "--no-progress", "--precision", "fp32"]) == 0
    sources = [json.loads(line)["source_id"] for line in noise.read_text().splitlines()]
    assert sources == [str(i) for i in range(24)]
    examples = [_ex(0, i) for i in range(24)]
    attach_noise(examples, [{"text": r["text"]} for r in rows[:24]],
                 [json.loads(line) for line in noise.read_text().splitlines()], str(noise))
    assert [e.noise for e in examples] == [[i] for i in range(24)]
    assert main(["classify", "train", "--data", str(data), "--encoder", str(classify_fixture / "encoder"),
                 "--out", str(tmp_path / "run"), "--energy", "hidden", "--noise", str(noise), "--max-steps", "2",
                 "--no-progress", "--precision", "fp32"]) == 0
