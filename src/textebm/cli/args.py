"""Build argparse parsers from dataclass configs.

Each command is a dataclass (its config) plus a function taking it. Field metadata:
  help (str), positional (bool), choices (list), flag (str, overrides --field-name).
Bool fields become --name / --no-name. Unknown flags are errors (argparse exits with 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any


def _base_type(tp: Any) -> tuple[Any, bool]:
    """Return (inner type, optional?) for T or Optional[T]."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init or f.metadata.get("cli", True) is False:
            continue
        tp, optional = _base_type(hints[f.name])
        meta = f.metadata
        help_ = meta.get("help", "")
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = (
            f.default if f.default is not dataclasses.MISSING
            else f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        )
        if meta.get("positional"):
            kwargs: dict[str, Any] = {"help": help_, "metavar": f.name.upper()}
            if has_default:
                kwargs["nargs"] = "?"
                kwargs["default"] = default
            parser.add_argument(f.name, type=_converter(tp), choices=meta.get("choices"), **kwargs)
            continue
        flag = meta.get("flag", "--" + f.name.replace("_", "-"))
        if tp is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=default, help=help_)
            continue
        kwargs = {"dest": f.name, "help": help_ + (f" (default: {default})" if has_default and default is not None else "")}
        if typing.get_origin(tp) in (list, tuple):
            (item,) = typing.get_args(tp)[:1]
            kwargs["nargs"] = "+"
            tp = item
        if has_default:
            kwargs["default"] = default
        else:
            kwargs["required"] = True
        parser.add_argument(flag, type=_converter(tp), choices=meta.get("choices"), **kwargs)


def _converter(tp: Any):
    if tp in (str, int, float):
        return tp
    if tp is Path:
        return Path
    return str


def dataclass_from_namespace(cls: type, ns: argparse.Namespace) -> Any:
    kwargs = {f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)
              if f.init and f.metadata.get("cli", True) is not False and hasattr(ns, f.name)}
    return cls(**kwargs)
