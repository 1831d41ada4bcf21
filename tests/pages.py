"""The pages a person reads (the README and docs/) as a test reads them: their fenced blocks,
and a page's first feed run as it is written."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support import REPO, user_env

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def section(page: Path, first: str | None, last: str | None, *langs: str) -> list[Block]:
    """The blocks of ``langs`` in ``page`` between the headings ``first`` and ``last`` (None:
    the page's start, or its end), in the page's order."""
    found = [b for lang in langs for b in blocks(lang)
             if b.page == page and (first is None or b.line > line_of(page, first))
             and (last is None or b.line < line_of(page, last))]
    return sorted(found, key=lambda b: b.line)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str | None  # the HTML comment on the line before, without <!-- -->

    def __str__(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(lang: str) -> list[Block]:
    """The fenced blocks of a language in every page, dedented (a block in a list item is
    indented), with their marker."""
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            opening = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
            if not opening:
                i += 1
                continue
            indent, start = opening.group(1), i
            i += 1
            while not re.match(rf"^{indent}```\s*$", lines[i]):
                i += 1
            if opening.group(2) == lang:
                body = [line.removeprefix(indent) for line in lines[start + 1:i]]
                before = re.match(r"^\s*<!--\s*(.*?)\s*-->\s*$", lines[start - 1]) \
                    if start else None
                found.append(Block(page, start + 1, lang, "\n".join(body) + "\n",
                                   before.group(1) if before else None))
            i += 1
    return found



def run_as_written(tmp_path: Path, section: list[Block],
                   after: Callable[[Block, str], None] | None = None) -> str:
    """A first feed on a fresh folder holding the shipped environments: in the page's order,
    each spec a conf block shows written to its file (a spec written by hand, or one a command
    wrote, as edited), each bash block run by bash as it is written; their output. ``after``
    is called with each bash block and its output once it has run."""
    shutil.copytree(REPO / "conf" / "environments", tmp_path / "conf" / "environments")
    (tmp_path / ".venv").symlink_to(REPO / ".venv" if (REPO / ".venv").exists()
                                    else Path(sys.executable).parents[1])
    env = user_env()
    out = ""
    for block in sorted(section, key=lambda b: b.line):
        if block.lang == "yaml":
            file = tmp_path / "conf" / (block.marker or "").removeprefix("conf: ") \
                .partition(" needs: ")[0]
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(block.text, encoding="utf-8")
            continue
        done = subprocess.run(["bash", "-e", "-c", block.text], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{block}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        out += done.stdout
        if after is not None:
            after(block, done.stdout)
    return out



def line_of(page: Path, heading: str) -> int:
    lines = page.read_text(encoding="utf-8").splitlines()
    return lines.index(heading) + 1
