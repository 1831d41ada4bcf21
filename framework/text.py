"""Plain-text tables for a person at a terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def render_table(header: Sequence[str], rows: Sequence[Sequence[Any]], sep: str = " | ") -> str:
    """Left-aligned columns under a header and a rule; None is shown as NULL."""
    cells = [["NULL" if v is None else str(v) for v in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]

    def line(values: Sequence[str]) -> str:
        return sep.join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    rule = sep.replace(" ", "-").replace("|", "+")
    out = [line(header), rule.join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out)
