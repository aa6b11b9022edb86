"""Every relative link in README.md, docs/*.md and bench/**/README.md leads somewhere in the clone: the file or folder
exists (in a fresh clone: is committed), and a `#section` names a heading of the target as GitHub
spells its anchors. The docs cite results by linking their files under bench/results/, so a
renamed or uncommitted result shows up here."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# [text](target) or ![alt](target "title"); text may hold one level of [brackets]
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors for a file's headings: lower case, every character but letters, digits,
    `_`, `-` and spaces dropped, spaces to `-`; a repeated heading gets -1, -2, ..."""
    out, seen = set(), {}
    for line in FENCE.sub("", markdown).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(md_file: Path) -> list[str]:
    """'target: why' for each relative link of md_file that leads nowhere."""
    text = INLINE_CODE.sub("", FENCE.sub("", md_file.read_text()))
    bad = []
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (md_file.parent / path).resolve() if path else md_file
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            bad.append(f"{target}: no heading with that anchor in {dest.name}")
    return bad


def test_anchors_as_github_spells_them():
    md = ("# Results\n## 2026-11-27 (eighth session): BiT* scored; brown's BiT\n## Results\n"
          "```\n# not a heading\n```\n### Speed (`bench_joint.py`)\n")
    assert anchors(md) == {"results", "2026-11-27-eighth-session-bit-scored-browns-bit", "results-1",
                           "speed-bench_jointpy"}


def test_the_checker_finds_a_missing_file_and_a_wrong_anchor(tmp_path):
    (tmp_path / "b.md").write_text("# Real heading\n")
    a = tmp_path / "a.md"
    a.write_text("[ok](b.md#real-heading) [gone](c.json) [wrong](b.md#other) [web](https://x.org/y)\n"
                 "`[in code](d.md)`\n```\n[fenced](e.md)\n```\n![img](b.md) [self](#nothing)\n")
    assert broken_links(a) == ["c.json: no such file", "b.md#other: no heading with that anchor in b.md",
                               "#nothing: no heading with that anchor in a.md"]


# the guides and the hand-written diaries (the reports copied from run folders beside them link
# files of their run that were not committed)
GUIDES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("**/README.md"))]


@pytest.mark.parametrize("md_file", GUIDES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(md_file):
    assert broken_links(md_file) == [], f"{md_file.relative_to(ROOT)}: broken links"
