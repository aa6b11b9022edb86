"""One strictness for every model description file (classifier.json, cloze.json, energy.json)."""

import dataclasses
import re

import pytest

from textebm.errors import InputError
from textebm.models import classifier, cloze, seq_energy
from textebm.specs import spec_from_dict

GOOD = {
    "classifier": (classifier.spec_from_dict, {"labels": ["a", "b"]}),
    "cloze": (cloze.spec_from_dict, {"objective": "mlm", "vocab_size": 9, "start_id": 1, "end_id": 2, "pad_id": 0,
                                     "mask_id": 3, "tower": None, "embedding_dim": 8}),
    "energy": (seq_energy.spec_from_dict, {"kind": "linear", "vocab_size": 9, "length": 8}),
}


@pytest.mark.parametrize("kind", list(GOOD))
def test_every_kind_is_equally_strict(kind, tmp_path):
    read, good = GOOD[kind]
    where = tmp_path / f"{kind}.json"
    assert dataclasses.is_dataclass(read(dict(good), where))
    cases = {"unknown": ({**good, "surprise": 1}, "unknown field(s) surprise"),
             "type": ({**good, next(iter(good)): 12.5} if kind != "classifier" else {**good, "max_len": "64"},
                      "must be"),
             "not an object": ([good], "expected a JSON object")}
    if kind != "classifier":
        required = next(iter(good))
        cases["missing"] = ({k: v for k, v in good.items() if k != required}, f"missing field(s) {required}")
    for name, (raw, words) in cases.items():
        with pytest.raises(InputError, match=re.escape(words)) as e:
            read(raw, where)
        assert str(where) in str(e.value), name


@dataclasses.dataclass
class _Spec:
    n: int
    x: float = 0.5
    tag: str | None = None
    ids: list[int] = dataclasses.field(default_factory=list)
    flag: bool = False


@pytest.mark.parametrize("raw,ok", [
    ({"n": 3}, True), ({"n": 3, "x": 1}, True), ({"n": True}, False), ({"n": 3.0}, False),
    ({"n": 1, "tag": None}, True), ({"n": 1, "tag": 5}, False), ({"n": 1, "ids": [1, 2]}, True),
    ({"n": 1, "ids": [1, "2"]}, False), ({"n": 1, "flag": 1}, False), ({"n": 1, "x": "0.5"}, False),
])
def test_types_by_hand(raw, ok, tmp_path):
    if ok:
        assert spec_from_dict(_Spec, raw, tmp_path / "s.json") == _Spec(**raw)
    else:
        with pytest.raises(InputError, match="must be"):
            spec_from_dict(_Spec, raw, tmp_path / "s.json")
