"""The package's layers (docs/architecture.md), enforced on the source: which units may import
which, and that no component takes or imports a command's `*Config`."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "textebm"

# A unit (top-level module or package of textebm) may import units of lower layers only; within a
# layer only where ALLOWED says so. Keep in step with docs/architecture.md.
LAYERS = [
    # 0 foundation: files, errors, options, seeds, precision, reports, checkpoints, grids
    {"version", "errors", "io", "options", "outputs", "cache", "seeds", "precision", "bootstrap", "figures",
     "markdown", "specs", "checkpoint", "inference", "resumable", "grid", "fingerprint", "progress", "runfolder",
     "lazy"},
    {"data", "tokenizer", "assets"},  # 1 readers, datasets, tokenizers, registry assets
    {"energy", "losses", "calibration", "langevin", "sampling"},  # 2 maths on tensors and arrays: heads,
    # objectives, metrics, SGLD, the token draw
    {"models"},  # 3 every model and the one loader
    {"train"},  # 4 the one training loop
    {"lm"},  # 5 language models: training recipe, the sampler, scoring (noise models, generators)
    {"classify", "cloze", "scoring", "detection", "residual", "tagging", "images"},  # 6 the five systems
    {"api", "training"},  # 7 the Python API over the systems (textebm.load and one class a system; the
    # training commands' configs and functions)
    {"cli", "__main__", "textebm"},  # 8 the command line, and the package's face (`textebm.load`, lazily)
]
# textebm/__init__.py re-exports the API's names on first use (a PEP 562 __getattr__), from the top
# layer: nothing imports the package itself (its version lives in textebm.version).
LAZY: set[tuple[str, str]] = set()
ALLOWED = {("residual", "detection"),  # paper d builds on paper c's windows, negatives and energies
           ("__main__", "cli"), *LAZY}


def _layer(unit: str) -> int:
    for i, units in enumerate(LAYERS):
        if unit in units:
            return i
    raise AssertionError(f"unit {unit!r} is in no layer: add it to LAYERS and docs/architecture.md")


def _modules():
    for f in sorted(SRC.rglob("*.py")):
        parts = f.relative_to(SRC).with_suffix("").parts
        name = ".".join(("textebm", *parts)).removesuffix(".__init__")
        yield name, f, ast.parse(f.read_text(encoding="utf-8"))


def _unit(module: str) -> str:
    parts = module.split(".")
    named = any(len(parts) > 1 and parts[1] in units for units in LAYERS)
    if len(parts) < 2 or not (named or (SRC / parts[1]).is_dir() or (SRC / f"{parts[1]}.py").is_file()):
        return "textebm"  # the package itself (`textebm.load`, `textebm.training`)
    return parts[1]


def _imports(tree: ast.AST, module: str) -> list[tuple[str, list[str], int]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:  # relative: resolve against the module's package
                base = module.split(".")[:-node.level] if not module.endswith("__init__") else module.split(".")
                target = ".".join([*base, target] if target else base)
            if target.startswith("textebm"):
                out.append((target, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names if a.name.startswith("textebm")]
    return out


def layer_violations(modules) -> list[str]:
    bad = []
    for module, f, tree in modules:
        src = _unit(module)
        for target, names, line in _imports(tree, module):
            targets = [target] if target != "textebm" else [f"textebm.{n}" for n in names]
            for t in targets:
                dst = _unit(t)
                if dst == src or (src, dst) in ALLOWED:
                    continue
                a, b = _layer(src), _layer(dst)
                if b > a or (b == a and a != 0):  # foundation modules may import one another
                    bad.append(f"{f}:{line}: {src} (layer {a}) imports {dst} (layer {b})")
    return bad


def test_no_arrow_runs_back_up():
    bad = layer_violations(_modules())
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_the_layer_check_sees_an_arrow_up_even_inside_a_function():
    tree = ast.parse("def f():\n    from textebm.cli import main\n    from textebm.errors import TextebmError\n")
    assert layer_violations([("textebm.models.x", "models/x.py", tree)]) == [
        "models/x.py:2: models (layer 3) imports cli (layer 8)"]
    tree = ast.parse("from textebm.detection.windows import make_windows\n")
    assert layer_violations([("textebm.classify.x", "classify/x.py", tree)])  # one system into another
    assert not layer_violations([("textebm.residual.x", "residual/x.py", tree)])  # d builds on c


def command_configs() -> dict[str, str]:
    """{config class name: module defining it} of every command the CLI registers."""
    from textebm.cli import GROUPS

    out = {}
    for module_name, _ in GROUPS.values():
        mod = importlib.import_module(module_name)
        pairs = [mod.COMMAND] if hasattr(mod, "COMMAND") else list(mod.COMMANDS.values())
        for cls, _fn in pairs:
            out[cls.__name__] = cls.__module__
    return out


def test_components_take_no_command_config():
    """Configs stay in the command layer: a function outside cli/, the command modules (those
    defining a command's config) and `textebm.training` (which re-exports the training commands'
    for Python) neither takes a command `*Config` nor imports one."""
    configs = command_configs()
    assert len(configs) >= 20
    command_modules = set(configs.values())
    bad = []
    for module, f, tree in _modules():
        if module.startswith("textebm.cli") or module in command_modules or module == "textebm.training":
            continue
        for target, names, line in _imports(tree, module):
            hit = [n for n in names if n in configs]
            if hit:
                bad.append(f"{f.relative_to(SRC.parent)}:{line}: imports {', '.join(hit)}")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                for a in args:
                    ann = ast.unparse(a.annotation) if a.annotation is not None else ""
                    hit = [c for c in configs if c in ann.replace("'", "").replace('"', "").split(".")[-1:]
                           or any(c == tok for tok in ann.replace("|", " ").replace("[", " ").replace("]", " ").split())]
                    if hit:
                        bad.append(f"{f.relative_to(SRC.parent)}:{node.lineno}: {node.name}({a.arg}: {ann})")
    assert not bad, "components that take or import a command config:\n" + "\n".join(bad)


def test_no_import_cycle_between_units():
    edges: dict[str, set[str]] = {}
    for module, _f, tree in _modules():
        for target, names, _line in _imports(tree, module):
            for t in ([target] if target != "textebm" else [f"textebm.{n}" for n in names]):
                if _unit(t) != _unit(module) and (_unit(module), _unit(t)) not in LAZY:
                    edges.setdefault(_unit(module), set()).add(_unit(t))
    seen, stack = set(), []

    def visit(u):
        if u in stack:
            pytest.fail("import cycle: " + " -> ".join([*stack[stack.index(u):], u]))
        if u in seen:
            return
        seen.add(u)
        stack.append(u)
        for v in sorted(edges.get(u, ())):
            visit(v)
        stack.pop()

    for u in sorted(edges):
        visit(u)


def _units() -> set[str]:
    """Every top-level unit of the package: its modules (no .py) and packages."""
    return {p.stem for p in SRC.glob("*.py")} | {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}


def test_every_unit_has_a_layer():
    assert _units() - {"__init__"} == set().union(*LAYERS) - {"textebm"}


def test_readme_layout_and_architecture_name_every_unit():
    """A newcomer finds every unit in the README's Layout and in docs/architecture.md's layers."""
    root = SRC.parents[1]
    readme = (root / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    layout = layout[layout.index("```"):layout.index("```", layout.index("```") + 3)]
    arch = (root / "docs" / "architecture.md").read_text()
    arch = arch[arch.index("```"):arch.index("```", arch.index("```") + 3)]
    import re

    for unit in sorted(_units()):
        named = re.compile(rf"(?<![\w.]){re.escape(unit)}(\.py|/)")
        assert named.search(layout), f"README.md's Layout does not name {unit}"
        assert named.search(arch) or re.search(rf"(?<![\w.]){re.escape(unit)}\b", arch), \
            f"docs/architecture.md's layers do not name {unit}"
