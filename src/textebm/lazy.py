"""Names a package gives on first use (PEP 562): a system's command config and function re-exported
from its package without loading the command module when a library module of it is imported."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], list[str]]:
    """(`__getattr__`, `__all__`) for `package`: each name of `names` is read from the submodule it
    maps to (`package.SUBMODULE`) when first asked for; any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__, list(names)
