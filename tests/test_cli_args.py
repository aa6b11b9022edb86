"""Options from dataclass fields: bounds checked once, inapplicable options refused, help that reads well."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from textebm.cli.args import add_dataclass_arguments, dataclass_from_namespace
from textebm.options import check_config, refuse_unused
from textebm.errors import TextebmError


@dataclass(kw_only=True)
class Base:
    out: str = field(metadata={"help": "where"})
    batch_size: int = field(default=32, metadata={"help": "examples per batch", "min": 1})
    lr: float = field(default=1e-3, metadata={"help": "learning rate", "gt": 0})


@dataclass(kw_only=True)
class Cmd(Base):
    data: str = field(metadata={"help": "data"})
    ratio: float = field(default=0.5, metadata={"help": "a ratio", "min": 0, "max": 1})
    mode: str = field(default="a", metadata={"help": "mode", "choices": ["a", "b"]})
    extra: str = field(default="", metadata={"help": "only for mode b"})
    note: str | None = field(default=None, metadata={"help": "a note (default: none)"})

    def check(self):
        if self.mode != "b":
            refuse_unused(self, ["extra"], "unless --mode b")


def _parse(*argv):
    p = argparse.ArgumentParser()
    add_dataclass_arguments(p, Cmd)
    return dataclass_from_namespace(Cmd, p.parse_args(list(argv))), p


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["--lr", "nan"], "--lr must be a finite number"),
    (["--lr", "-1"], "--lr must be greater than 0"),
    (["--lr", "inf"], "--lr must be a finite number"),
    (["--ratio", "1.5"], "--ratio must be at most 1"),
    (["--extra", "x"], "--extra has no effect unless --mode b"),
])
def test_bad_values_name_the_option(argv, message):
    with pytest.raises(TextebmError, match=message.replace("(", r"\(")):
        _parse("--out", "o", "--data", "d", *argv)


def test_good_values_pass_and_inapplicable_defaults_are_fine():
    cfg, _ = _parse("--out", "o", "--data", "d", "--mode", "b", "--extra", "x", "--ratio", "1")
    assert cfg.extra == "x" and cfg.ratio == 1.0
    check_config(cfg)


def test_help_required_first_own_before_shared_no_empty_or_double_defaults():
    _, p = _parse("--out", "o", "--data", "d")
    text = p.format_help()
    body = text[text.index("options:"):]
    assert max(body.index("--out"), body.index("--data")) < body.index("--ratio") < body.index("--batch-size")
    assert "(default: )" not in text and "(default: None)" not in text
    assert text.count("default") == text.count("(default:")  # one default per option at most
    assert "(default: none) (default" not in text


def test_every_commands_help_reads_well():
    from textebm.cli import build_parser

    parser = build_parser()
    top = parser.format_help()
    assert "convert" in top and "minilm-l6" in top
    groups = parser._subparsers._group_actions[0].choices
    for name, gp in groups.items():
        gp.format_help()  # lists the group's commands with their help lines (argparse %-formats them)
        subs = [gp] if gp._subparsers is None else list(gp._subparsers._group_actions[0].choices.values())
        for sp in subs:
            text = sp.format_help()
            assert "(default: )" not in text and "(default: None)" not in text, sp.prog
            assert "(Adam)" not in text, sp.prog  # the optimizer is AdamW
            for line in text.splitlines():
                assert line.count("(default") <= 1, (sp.prog, line)

