"""The manual's links hold: every relative link in ``docs/*.md`` and ``README.md`` names a file
of the repository and, with ``#anchor``, a heading of that file (GitHub's anchor rules); and
nothing points to the workspace files the repository does not hold (``DESIGN.md``,
``REFERENCE.md``).

Pure text checks on the files as committed: no cluster, no network.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

# [text](target), not images; the target up to the first space or closing parenthesis.
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_OUTSIDE = ("DESIGN.md", "REFERENCE.md")


def _prose(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r"`[^`]*`", "``", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor GitHub gives the page's headings (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            k = seen.get(base, 0)
            seen[base] = k + 1
            out.add(base if k == 0 else f"{base}-{k}")
    return out


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Relative links of ``page`` whose file or heading does not exist, named from ``root``."""
    bad = []
    for n, line in _prose(page.read_text()):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, frag = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}:{n}: {target}"
            if not dest.exists():
                bad.append(f"{where} (no such file)")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                bad.append(f"{where} (no such heading)")
    return bad


def test_slug_follows_githubs_rules() -> None:
    assert slug("Page cache: a bounded footprint (`log_page_cache_keep_bytes`)") == (
        "page-cache-a-bounded-footprint-log_page_cache_keep_bytes"
    )
    assert slug("Configuration (Kafka's topic config names)") == (
        "configuration-kafkas-topic-config-names"
    )
    assert slug("`longboat groups`") == "longboat-groups"
    assert (
        slug("Consumer groups in `__consumer_offsets`") == "consumer-groups-in-__consumer_offsets"
    )


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#a-heading) [gone](missing.md) [no](there.md#nope)\n"
        "```\n[in code](ignored.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "page.md:1: missing.md (no such file)",
        "page.md:1: there.md#nope (no such heading)",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_no_reference_to_files_outside_the_repository() -> None:
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    this = Path(__file__).resolve().relative_to(ROOT).as_posix()
    hits = []
    for name in tracked:
        path = ROOT / name
        if not name or name == this or path.suffix not in {".md", ".py", ".sh", ".toml"}:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            hits += [f"{name}:{n}: {f}" for f in _OUTSIDE if f in line]
    assert hits == []
