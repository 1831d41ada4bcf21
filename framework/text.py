"""Text for and from a person at a terminal: plain-text tables, periods such as ``30d``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

PERIOD = re.compile(r"^\s*(?P<n>\d+)\s*(?P<unit>w|weeks?|d|days?|h|hours?|m|minutes?)\s*$")
UNIT_MS = {"w": 604_800_000, "d": 86_400_000, "h": 3_600_000, "m": 60_000}


def period_ms(text: str) -> int | None:
    """``2w``, ``30d``, ``12h`` or ``90m`` (also ``30 days``...) in milliseconds; None for
    text that is not a period."""
    m = PERIOD.match(text)
    return int(m.group("n")) * UNIT_MS[m.group("unit")[0]] if m else None


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
