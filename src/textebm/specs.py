"""A model's description file (`classifier.json`, `cloze.json`, `energy.json`) read into its spec
dataclass, with one strictness for every kind: a JSON object, no unknown field, every required
field present, each value of its declared type. The kind's own rules (choices, ranges) follow in
its module. Every failure is an `InputError` naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar


from textebm.checkpoint import save_weights
from textebm.errors import InputError
from textebm.io import write_json

S = TypeVar("S")


def spec_from_dict(cls: type[S], raw: Any, path: str | Path) -> S:
    """An instance of dataclass `cls` from the parsed JSON `raw` read from `path`."""
    if not isinstance(raw, dict):
        raise InputError(path, f"expected a JSON object, got {type(raw).__name__}")
    fields = dataclasses.fields(cls)
    known = {f.name for f in fields}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise InputError(path, f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    missing = [f.name for f in fields if f.name not in raw and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise InputError(path, f"missing field(s) {', '.join(missing)}")
    hints = typing.get_type_hints(cls)
    for name, value in raw.items():
        if not _is(value, hints[name]):
            raise InputError(path, f"'{name}' must be {_name(hints[name])}, got {value!r}")
    return cls(**raw)


def _is(value: Any, tp: Any) -> bool:
    """Whether a JSON value fits a declared type (int, float, str, bool, list, dict, X | None)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_is(value, t) for t in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if (origin or tp) is list:
        args = typing.get_args(tp)
        return isinstance(value, list) and (not args or all(_is(v, args[0]) for v in value))
    if (origin or tp) is dict:
        return isinstance(value, dict)
    return True  # a type JSON cannot hold is checked by the kind's own rules


def _name(tp: Any) -> str:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_name(t) for t in typing.get_args(tp))
    if tp is type(None):
        return "null"
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list",
             dict: "an object"}
    return names.get(typing.get_origin(tp) or tp, str(tp))


def save_with_spec(model, path: str | Path, spec_file: str) -> None:
    """`model.safetensors` and `model.spec` as JSON (`spec_file`, the kind's marker) in the folder
    `path`: the folder of a model kind whose module holds its own spec (a tagger, a ConvNet);
    `spec_from_dict` reads the spec back."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_weights(model, path / "model.safetensors")
    write_json(path / spec_file, dataclasses.asdict(model.spec))
