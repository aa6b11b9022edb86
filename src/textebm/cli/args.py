"""Build argparse parsers from dataclass configs, and check every option before any work.

Each command is a dataclass (its config) plus a function taking it. Field metadata:
  help (str), positional (bool), choices (list), flag (str, overrides --field-name),
  min / max (inclusive bounds), gt / lt (exclusive bounds): checked once, here, for every
  command; a float must also be finite. A config may define `check(self)` for rules between
  options (an option that does nothing in the chosen mode); it runs after the field checks.
Bool fields become --name / --no-name. Unknown flags are errors (argparse exits with 2).
Every failure is a `TextebmError` naming the option: exit status 2, no traceback, nothing written.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

from textebm.errors import TextebmError


def _base_type(tp: Any) -> tuple[Any, bool]:
    """Return (inner type, optional?) for T or Optional[T]."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


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
    return sorted(fields, key=lambda f: (field_default(f) is not dataclasses.MISSING, _inherited(cls, f.name)))


def _inherited(cls: type, name: str) -> bool:
    """True when `name` is declared by a dataclass base of `cls` (and not re-declared by cls)."""
    if name in cls.__dict__.get("__annotations__", {}):
        return False
    return any(dataclasses.is_dataclass(b) and name in {f.name for f in dataclasses.fields(b)}
               for b in cls.__mro__[1:])


def flag_of(f: dataclasses.Field) -> str:
    if f.metadata.get("positional"):
        return f.name.upper()
    return f.metadata.get("flag", "--" + f.name.replace("_", "-"))


def _show_default(default: Any) -> str:
    if default is None or default == "" or default == [] or isinstance(default, bool):
        return ""
    return f" (default: {default})"


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    hints = typing.get_type_hints(cls)
    shared = None
    for f in cli_fields(cls):
        target = parser
        if _inherited(cls, f.name) and field_default(f) is not dataclasses.MISSING:
            shared = shared or parser.add_argument_group("options shared by every training command")
            target = shared
        tp, _ = _base_type(hints[f.name])
        meta = f.metadata
        help_ = meta.get("help", "").replace("%", "%%")  # argparse %-formats help strings
        default = field_default(f)
        has_default = default is not dataclasses.MISSING
        if meta.get("positional"):
            if meta.get("choices") and "choices" not in help_:
                help_ += " (one of: " + ", ".join(map(str, meta["choices"])) + ")"
            kwargs: dict[str, Any] = {"help": help_, "metavar": f.name.upper()}
            if has_default:
                kwargs["nargs"] = "?"
                kwargs["default"] = default
            target.add_argument(f.name, type=_converter(tp), choices=meta.get("choices"), **kwargs)
            continue
        flag = flag_of(f)
        if tp is bool:
            target.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=default, help=help_)
            continue
        shown = "" if "(default" in help_ or not has_default else _show_default(default)
        kwargs = {"dest": f.name, "help": help_ + shown}
        if typing.get_origin(tp) in (list, tuple):
            (item,) = typing.get_args(tp)[:1]
            kwargs["nargs"] = "+"
            tp = item
        if has_default:
            kwargs["default"] = default
        else:
            kwargs["required"] = True
        target.add_argument(flag, type=_converter(tp), choices=meta.get("choices"), **kwargs)


def _converter(tp: Any):
    if tp in (str, int, float):
        return tp
    if tp is Path:
        return Path
    return str


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
        if "gt" in meta and not v > meta["gt"]:
            raise TextebmError(f"{flag} must be greater than {meta['gt']}, got {v}")
        if "lt" in meta and not v < meta["lt"]:
            raise TextebmError(f"{flag} must be less than {meta['lt']}, got {v}")


def check_config(cfg: Any) -> None:
    """Every field's bounds, then the config's own `check()` (rules between options)."""
    for f in cli_fields(type(cfg)):
        check_value(f, getattr(cfg, f.name))
    if hasattr(cfg, "check"):
        cfg.check()


def changed(cfg: Any, name: str) -> bool:
    """True when option `name` differs from its default (the user set it)."""
    f = next(f for f in dataclasses.fields(cfg) if f.name == name)
    return getattr(cfg, name) != field_default(f)


def refuse_unused(cfg: Any, names: list[str], why: str) -> None:
    """Options that do nothing in the chosen mode: refuse them instead of ignoring them."""
    set_ = [n for n in names if changed(cfg, n)]
    if set_:
        flags = ", ".join("--" + n.replace("_", "-") for n in set_)
        raise TextebmError(f"{flags} {'has' if len(set_) == 1 else 'have'} no effect {why}; leave "
                           f"{'it' if len(set_) == 1 else 'them'} out")


def dataclass_from_namespace(cls: type, ns: argparse.Namespace) -> Any:
    kwargs = {f.name: getattr(ns, f.name) for f in cli_fields(cls) if hasattr(ns, f.name)}
    cfg = cls(**kwargs)
    check_config(cfg)
    return cfg
