"""Every relative link in README.md, docs/*.md and bench/**/README.md leads somewhere in a fresh
clone: the file or folder is committed (git ls-files, where the tree is a git checkout), and a
`#section` names a heading of the target as GitHub spells its anchors. The docs cite results by
linking their files under bench/results/, so a renamed or uncommitted result shows up here.
Links are read by a CommonMark parser (markdown-it-py), so code spans, fences, titles, angle
brackets and reference-style links are read as GitHub reads them; `href=` / `src=` of raw HTML too."""
import re
import subprocess
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
HTML_LINK = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""")
PARSER = MarkdownIt("commonmark").enable("table")


@cache
def committed(root: Path) -> frozenset[Path] | None:
    """The committed files of the checkout at root and every folder above them; None outside git."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    files = {(root / f).resolve() for f in out.decode().split("\0") if f}
    return frozenset(files | {d for f in files for d in f.parents})


def _inline_text(token) -> str:
    """A heading's text as rendered: text and code spans, link texts without their targets."""
    return "".join(c.content for c in token.children or [] if c.type in ("text", "code_inline", "html_inline"))


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors for a file's headings: the rendered text in lower case, every character but
    letters, digits, `_`, `-` and spaces dropped, spaces to `-`; a repeated heading gets -1, -2, ..."""
    out, seen = set(), {}
    tokens = PARSER.parse(markdown)
    for opening, inline in zip(tokens, tokens[1:]):
        if opening.type != "heading_open":
            continue
        slug = re.sub(r"[^\w\- ]", "", _inline_text(inline).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _targets(markdown: str) -> list[str]:
    """Every link and image target of the document, in order (raw HTML's href / src included)."""
    found = []
    for token in PARSER.parse(markdown):
        if token.type == "html_block":
            found += HTML_LINK.findall(token.content)
        for child in token.children or []:
            if child.type == "link_open":
                found.append(child.attrs["href"])
            elif child.type == "image":
                found.append(child.attrs["src"])
            elif child.type == "html_inline":
                found += HTML_LINK.findall(child.content)
    return found


def broken_links(md_file: Path, root: Path = ROOT) -> list[str]:
    """'target: why' for each relative link of md_file that leads nowhere in a clone of root."""
    tracked = committed(root)
    bad = []
    for target in _targets(md_file.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (md_file.parent / unquote(path)).resolve() if path else md_file.resolve()
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif tracked is not None and dest not in tracked:
            bad.append(f"{target}: not committed")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            bad.append(f"{target}: no heading with that anchor in {dest.name}")
    return bad


def test_anchors_as_github_spells_them():
    md = ("# Results\n## 2026-11-27 (eighth session): BiT* scored; brown's BiT\n## Results\n"
          "```\n# not a heading\n```\n### Speed (`bench_joint.py`)\n  ## See [the docs](x.md)\n"
          "Setext\n======\n")
    assert anchors(md) == {"results", "2026-11-27-eighth-session-bit-scored-browns-bit", "results-1",
                           "speed-bench_jointpy", "see-the-docs", "setext"}


def test_the_checker_finds_every_kind_of_link_that_leads_nowhere(tmp_path):
    (tmp_path / "b.md").write_text("# Real heading\n")
    a = tmp_path / "a.md"
    a.write_text("[ok](b.md#real-heading) [gone](c.json) [wrong](b.md#other) [web](https://x.org/y)\n"
                 "`[in code](d.md)`\n```\n[fenced](e.md)\n```\n![img](b.md) [self](#nothing)\n\n"
                 "[t](f.md 'title') [a](<g h.md>) [r][ref] <a href=\"i.md\">x</a>\n\n"
                 "a `b` [l](j.md) `c`\n\n[ref]: k.md\n")
    assert broken_links(a, tmp_path) == [
        "c.json: no such file", "b.md#other: no heading with that anchor in b.md",
        "#nothing: no heading with that anchor in a.md", "f.md: no such file", "g%20h.md: no such file",
        "k.md: no such file", "i.md: no such file", "j.md: no such file"]


def test_an_uncommitted_file_is_a_broken_link(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "kept.json").write_text("{}")
    (tmp_path / "local.json").write_text("{}")
    (tmp_path / "a.md").write_text("[k](kept.json) [l](local.json)\n")
    subprocess.run(["git", "add", "kept.json", "a.md"], cwd=tmp_path, check=True)
    assert broken_links(tmp_path / "a.md", tmp_path) == ["local.json: not committed"]


# the guides and the hand-written diaries (the reports copied from run folders beside them link
# files of their run that were not committed)
GUIDES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("**/README.md"))]


@pytest.mark.parametrize("md_file", GUIDES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(md_file):
    assert broken_links(md_file) == [], f"{md_file.relative_to(ROOT)}: broken links"
