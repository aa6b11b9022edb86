"""Build argparse parsers from dataclass configs (see `textebm.options` for the field metadata),
and check every option (`textebm.options.check_config`) before any work.

Each command is a dataclass (its config) plus a function taking it. Required options come first,
then the command's own, then the shared training options in a group of their own.
Bool fields become --name / --no-name. Unknown flags are errors (argparse exits with 2).
Every failure is a `TextebmError` naming the option: exit status 2, no traceback, nothing written.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

from textebm.options import check_config, cli_fields, field_default, flag_of, inherited


def _base_type(tp: Any) -> tuple[Any, bool]:
    """Return (inner type, optional?) for T or Optional[T]."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _show_default(default: Any) -> str:
    if default is None or default == "" or default == [] or isinstance(default, bool):
        return ""
    return f" (default: {default})"


GIVEN = "_given"  # the options typed on the command line (a set of field names), on the namespace and the config


def _given(action: type[argparse.Action]) -> type[argparse.Action]:
    """`action` that also records its option as given: `refuse_unused` refuses an option typed in a
    mode where it does nothing even at its default value (`--context-ratio 0.5` beside
    `--context-tokens` was taken and ignored)."""

    class Given(action):
        def __call__(self, parser, namespace, values, option_string=None):
            super().__call__(parser, namespace, values, option_string)
            setattr(namespace, GIVEN, getattr(namespace, GIVEN, set()) | {self.dest})

    return Given


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    hints = typing.get_type_hints(cls)
    shared = None
    for f in cli_fields(cls):
        target = parser
        if inherited(cls, f.name) and field_default(f) is not dataclasses.MISSING:
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
            target.add_argument(flag, dest=f.name, action=_given(argparse.BooleanOptionalAction),
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
        target.add_argument(flag, type=_converter(tp), choices=meta.get("choices"), action=_given(argparse._StoreAction),
                            **kwargs)


def _converter(tp: Any):
    if tp in (str, int, float):
        return tp
    if tp is Path:
        return Path
    return str


def dataclass_from_namespace(cls: type, ns: argparse.Namespace) -> Any:
    kwargs = {f.name: getattr(ns, f.name) for f in cli_fields(cls) if hasattr(ns, f.name)}
    cfg = cls(**kwargs)
    object.__setattr__(cfg, GIVEN, frozenset(getattr(ns, GIVEN, ())))  # not a field: configs and records unchanged
    check_config(cfg)
    return cfg
