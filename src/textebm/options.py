"""Options of a command as a dataclass: defaults, bounds and rules between options.

Every command's config is a dataclass. Field metadata: help (str), positional (bool), choices
(list), flag (str, overrides --field-name), min / max (inclusive bounds), gt / lt (exclusive
bounds); a float must also be finite. A config may define `check(self)` for rules between
options (an option that does nothing in the chosen mode: `refuse_unused`). `check_config` runs
both, after each value's type and choices (which argparse checks on the command line, but a
config built in Python, `textebm.training`, may break); the command line (`textebm.cli.args`)
calls it before any work, and so do commands called from Python. Every failure is a
`TextebmError` naming the option (exit status 2).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import types
import typing
from pathlib import Path
from typing import Any

from textebm.errors import TextebmError


def threads_field(help: str = "CPU threads (0: torch default)") -> Any:
    """The `--threads` option of every command that runs a model (0: torch's default), applied by
    `textebm.inference.set_threads`."""
    return dataclasses.field(default=0, metadata={"help": help, "min": 0, "max_cores": True})


def text_field_option() -> Any:
    """`--text-field` of a command that reads texts from a user's file (`read_examples`)."""
    return dataclasses.field(default=None, metadata={
        "help": "the column / key holding the text (default: auto-detected: text, sentence, question1, premise, ...)"})


def id_field_option() -> Any:
    """`--id-field` of a command that reads texts from a user's file: its rows' ids."""
    return dataclasses.field(default=None, metadata={
        "help": "the column / key holding each text's id (default: id, idx, index, guid if present; else the row's "
                "number, from 0)"})


def keep_best_field(measure: str) -> Any:
    """The `--keep-best` option of a training command: after every epoch `measure` (the recipe's
    `validate`), and the run ends with the weights of the lowest (`textebm.train`'s keep_best)."""
    return dataclasses.field(default=False, metadata={
        "help": f"after every epoch, {measure}; the run ends with the weights of the lowest, not the last "
                "(train to the dev optimum: give --epochs room and --patience)"})


def patience_field() -> Any:
    """The `--patience` option that goes with `keep_best_field`."""
    return dataclasses.field(default=0, metadata={
        "help": "with --keep-best: stop after this many epochs without a lower validation loss (0: run them all)",
        "min": 0})


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it, else the
    machine's): the most threads a `--threads` value may ask for."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def cli_fields(cls: type) -> list[dataclasses.Field]:
    """The fields that are options: required ones first, then the command's own, then those it
    inherits (the shared training options), each in declaration order."""
    fields = [f for f in dataclasses.fields(cls) if f.init and f.metadata.get("cli", True) is not False]
    return sorted(fields, key=lambda f: (field_default(f) is not dataclasses.MISSING, inherited(cls, f.name)))


def inherited(cls: type, name: str) -> bool:
    """True when `name` is declared by a dataclass base of `cls` (and not re-declared by cls)."""
    if name in cls.__dict__.get("__annotations__", {}):
        return False
    return any(dataclasses.is_dataclass(b) and name in {f.name for f in dataclasses.fields(b)}
               for b in cls.__mro__[1:])


def flag_of(f: dataclasses.Field) -> str:
    if f.metadata.get("positional"):
        return f.name.upper()
    return f.metadata.get("flag", "--" + f.name.replace("_", "-"))


def check_value(f: dataclasses.Field, value: Any) -> None:
    """Raise TextebmError naming the option when `value` breaks the field's bounds."""
    if value is None:
        return
    values = value if isinstance(value, (list, tuple)) else [value]
    meta, flag = f.metadata, flag_of(f)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if isinstance(v, float) and not math.isfinite(v):
            raise TextebmError(f"{flag} must be a finite number, got {v}")
        if "min" in meta and v < meta["min"]:
            raise TextebmError(f"{flag} must be at least {meta['min']}, got {v}")
        if "max" in meta and v > meta["max"]:
            raise TextebmError(f"{flag} must be at most {meta['max']}, got {v}")
        if meta.get("max_cores") and v > usable_cores():
            raise TextebmError(f"{flag} must be at most {usable_cores()}, the cores this process may use, got {v} "
                               "(more threads than cores only slow torch down; 0 takes torch's default)")
        if "gt" in meta and not v > meta["gt"]:
            raise TextebmError(f"{flag} must be greater than {meta['gt']}, got {v}")
        if "lt" in meta and not v < meta["lt"]:
            raise TextebmError(f"{flag} must be less than {meta['lt']}, got {v}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The fields' annotations resolved; {} where they cannot be (a class defined inside a function
    naming its local types): its values' types go unchecked."""
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError):
        return {}


_NOTHING = object()  # a value of no type: what None is to an annotation that does not admit it


def kind_problem(tp: Any, v: Any) -> str:
    """'' when `v` fits the annotation `tp` as a Python caller may give it (a path as a str or a
    pathlib.Path, a list as a list or tuple), else what it should be. None fits an annotation that
    admits it (`str | None`: an unset option) or that names no type (Any)."""
    if v is None:
        if tp is Any or type(None) in typing.get_args(tp):
            return ""
        return kind_problem(tp, _NOTHING)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        problems = [kind_problem(a, v) for a in typing.get_args(tp) if a is not type(None)]
        return "" if "" in problems else " or ".join(problems)
    if typing.get_origin(tp) in (list, tuple):
        if not isinstance(v, (list, tuple)):
            return "a list"
        item = (typing.get_args(tp) or (Any,))[0]
        bad = next((p for p in (kind_problem(item, x) for x in v) if p), "")
        return f"a list, each item {bad}" if bad else ""
    whole = isinstance(v, numbers.Integral) and not isinstance(v, bool)
    wants = {bool: ("true or false", isinstance(v, bool)),
             int: ("a whole number", whole),
             float: ("a number", whole or isinstance(v, numbers.Real) and not isinstance(v, bool)),
             str: ("a string", isinstance(v, (str, os.PathLike))),
             Path: ("a path", isinstance(v, (str, os.PathLike)))}
    want, ok = wants.get(tp, ("", True))
    return "" if ok else want


def check_kind(f: dataclasses.Field, tp: Any, value: Any) -> None:
    """Raise TextebmError naming the option when `value` is not of the field's type (`tp`, its
    resolved annotation) or not among its choices (each item of a list)."""
    flag = flag_of(f)
    if want := kind_problem(tp, value):
        raise TextebmError(f"{flag} must be {want}, got {value!r}")
    choices = f.metadata.get("choices")
    items = value if isinstance(value, (list, tuple)) else [value]
    bad = [v for v in items if v is not None and choices is not None and v not in choices]
    if bad:
        raise TextebmError(f"{flag} must be one of {', '.join(map(str, choices))}, got {bad[0]!r}")


def type_problem(f: dataclasses.Field, v: Any) -> str:
    """'' when `v` (from a config file) fits option `f`'s type and choices, else what it should be."""
    number = lambda x, t: isinstance(x, t) and not isinstance(x, bool)
    t = str(f.type)
    if t == "bool" and not isinstance(v, bool):
        return "true or false"
    if t == "int" and not number(v, int):
        return "an integer"
    if t == "float" and not number(v, (int, float)):
        return "a number"
    if t in ("str", "str | None") and not isinstance(v, str):
        return "a string"
    if t == "list[int]" and not (isinstance(v, list) and v and all(number(x, int) for x in v)):
        return "a list of integers"
    if "choices" in f.metadata and v not in f.metadata["choices"]:
        return "one of " + ", ".join(map(str, f.metadata["choices"]))
    return ""


def check_config(cfg: Any) -> None:
    """Every field's type, choices and bounds, then the config's own `check()` (rules between options)."""
    hints = _hints(type(cfg))
    for f in cli_fields(type(cfg)):
        check_kind(f, hints.get(f.name, Any), getattr(cfg, f.name))
        check_value(f, getattr(cfg, f.name))
    if hasattr(cfg, "check"):
        cfg.check()


def changed(cfg: Any, name: str) -> bool:
    """True when the user set option `name`: typed it on the command line (`cli.args` records the
    options given in `cfg._given`, whatever their value), or, for a config built in Python, gave
    it a value other than its default."""
    given = getattr(cfg, "_given", None)
    if given is not None and name in given:
        return True
    f = next(f for f in dataclasses.fields(cfg) if f.name == name)
    return getattr(cfg, name) != field_default(f)


def refuse_unused(cfg: Any, names: list[str], why: str) -> None:
    """Options that do nothing in the chosen mode: refuse them instead of ignoring them."""
    set_ = [n for n in names if changed(cfg, n)]
    if set_:
        flags = ", ".join("--" + n.replace("_", "-") for n in set_)
        raise TextebmError(f"{flags} {'has' if len(set_) == 1 else 'have'} no effect {why}; leave "
                           f"{'it' if len(set_) == 1 else 'them'} out")


def options_dict(cfg: Any) -> dict:
    """A config dataclass as plain JSON (for RUN/config.json)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}


def option_defaults(cfg: Any, config: dict) -> dict:
    """The defaults, as plain JSON, of the options of `cfg` (a config dataclass) that `config`
    records. A run's config.json written before an option existed lacks its key, and ran as its
    default does (an option added later defaults to the earlier behaviour), so --resume reads a
    missing key as the default: such a run resumes, unless the option is now given another value."""
    out = {}
    for f in dataclasses.fields(cfg):
        value = field_default(f)
        if f.name in config and value is not dataclasses.MISSING:
            out[f.name] = str(value) if isinstance(value, Path) else value
    return out
