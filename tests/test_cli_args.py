"""Options from dataclass fields: bounds checked once, inapplicable options refused, help that reads well."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
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
    (["--extra", ""], "--extra has no effect unless --mode b"),  # typed, though at its default value
])
def test_bad_values_name_the_option(argv, message):
    with pytest.raises(TextebmError, match=message.replace("(", r"\(")):
        _parse("--out", "o", "--data", "d", *argv)


def test_an_option_typed_counts_as_set_and_one_left_out_does_not():
    """The command line records the options typed (`changed`): an unused one is refused even at its
    default value; a config built in Python counts an option as set when it is not its default."""
    cfg, _ = _parse("--out", "o", "--data", "d", "--lr", "0.001")
    assert cfg._given == {"out", "data", "lr"}
    check_config(Cmd(out="o", data="d", extra=""))  # Python: the default value is no setting
    with pytest.raises(TextebmError, match="--extra has no effect"):
        check_config(Cmd(out="o", data="d", extra="y"))


def test_good_values_pass_and_inapplicable_defaults_are_fine():
    cfg, _ = _parse("--out", "o", "--data", "d", "--mode", "b", "--extra", "x", "--ratio", "1")
    assert cfg.extra == "x" and cfg.ratio == 1.0
    check_config(cfg)


@dataclass(kw_only=True)
class Lists:
    sizes: list[int] = field(default_factory=lambda: [1], metadata={"help": "sizes", "min": 1})
    files: list[Path] = field(default_factory=list, metadata={"help": "files"})
    modes: list[str] = field(default_factory=lambda: ["a"], metadata={"help": "modes", "choices": ["a", "b"]})


@pytest.mark.parametrize("cfg, message", [
    (Cmd(out="o", data="d", mode="c"), "--mode must be one of a, b, got 'c'"),
    (Cmd(out="o", data="d", batch_size="3"), "--batch-size must be a whole number, got '3'"),
    (Cmd(out="o", data="d", batch_size=3.0), "--batch-size must be a whole number, got 3.0"),
    (Cmd(out="o", data="d", batch_size=True), "--batch-size must be a whole number, got True"),
    (Cmd(out="o", data="d", lr="0.1"), "--lr must be a number, got '0.1'"),
    (Cmd(out=3, data="d"), "--out must be a string, got 3"),
    (Cmd(out="o", data="d", note=4), "--note must be a string, got 4"),
    (Lists(sizes=3), "--sizes must be a list, got 3"),
    (Lists(sizes=[1, "2"]), "--sizes must be a list, each item a whole number, got [1, '2']"),
    (Lists(files=["a", 2]), "--files must be a list, each item a path"),
    (Lists(modes=["a", "z"]), "--modes must be one of a, b, got 'z'"),
])
def test_a_config_built_in_python_is_checked_for_types_and_choices(cfg, message):
    """What argparse checks on the command line (a value's type, its choices), check_config checks
    for a config built in Python (textebm.training), naming the option, before its bounds."""
    with pytest.raises(TextebmError, match="^" + re.escape(message)):
        check_config(cfg)


def test_python_values_of_the_right_kind_pass():
    check_config(Cmd(out=Path("o"), data="d", batch_size=np.int64(3), lr=1, ratio=np.float64(0.5), note=None))
    check_config(Lists(sizes=(1, 2), files=[Path("a"), "b"], modes=["b"]))


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



def test_the_result_line_of_a_training_says_what_ran_even_without_an_evaluation():
    from textebm.cli.show import eval_line

    assert eval_line({"eval": {"dev_accuracy": 0.912345, "epochs": 2, "split": "dev"}}) == "dev_accuracy=0.9123, epochs=2"
    assert eval_line({"eval": {}, "train": {"steps": 40}}) == "trained 40 steps; no evaluation split"
    assert eval_line({}) == "no evaluation split"
