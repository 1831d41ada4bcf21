"""Event time across layers: what keeps a watermark in delivery order.

A feed is a backlog delivered in order: bronze's file source takes landing files by their
modification time, so each bronze micro-batch, and so each bronze commit, is a contiguous run of the
delivered files. A downstream query with a watermark (silver's deduplication, gold's windows) keeps
the guarantee below as long as each of its micro-batches reads whole upstream commits, in order:

1. no row that was on time in delivery order is dropped;
2. every row dropped as late was behind the watermark computed from the rows delivered before
   it (Spark's watermark for a micro-batch comes from the batches before it, which hold only
   rows delivered earlier);
3. every row dropped as a duplicate duplicates a row that was kept.

A late row arriving in the same micro-batch as the rows it is late against is kept.

Delta's streaming source admits a commit's files one at a time up to its limits (1000 files by
default, or ``maxFilesPerTrigger`` / ``maxBytesPerTrigger``); only commits carrying change-data
files or deletion vectors are admitted whole. An append commit of several files (bronze writes
one per task) can thus be split across micro-batches, the watermark advancing on the part read
first. So queries with a watermark read without a limit: every micro-batch takes every commit
available when it starts (:data:`ALL_AVAILABLE`).
"""

from __future__ import annotations

import re

# A byte limit nothing reaches: Delta's source then takes every available commit, whole.
ALL_AVAILABLE = f"{2**63 - 1}b"

SPLIT_COMMITS = ("a file or byte limit can split an upstream commit of several files across "
                 "micro-batches: the watermark then advances on the part read first, and rows "
                 "of the rest that were on time in delivery order are dropped as late")

_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86_400, "week": 604_800}
_PART = re.compile(r"(\d+)\s+(second|minute|hour|day|week)s?", re.IGNORECASE)


INTERVAL = re.compile(
    r"^\s*\d+\s+(second|minute|hour|day|week)s?(\s+\d+\s+(second|minute|hour|day|week)s?)*\s*$",
    re.IGNORECASE,
)


def check_interval(value: str, *, positive: bool = True) -> str:
    """``value`` if it is an interval the specs accept (``'10 minutes'``, ``'1 hour 30
    minutes'``), longer than zero unless ``positive`` is False (a watermark's delay may be
    zero); else ValueError saying what was expected and what was found, once."""
    if not INTERVAL.match(value):
        raise ValueError(f"expected an interval such as '10 minutes' or '1 hour', found "
                         f"{value!r}")
    if positive and interval_seconds(value) <= 0:
        raise ValueError(f"expected an interval longer than zero, found {value!r}")
    return value


def interval_seconds(text: str) -> int:
    """``'2 days'``, ``'1 hour 30 minutes'`` (the intervals specs accept) in seconds."""
    parts = _PART.findall(text)
    if not parts:
        raise ValueError(f"expected an interval such as '10 minutes', found {text!r}")
    return sum(int(n) * _UNITS[unit.lower()] for n, unit in parts)


def split_commits_advice(table: str, source: str, uses: str, max_files: int | None,
                         max_bytes: str | None, reason: str = SPLIT_COMMITS,
                         whole: str = "no on-time row is dropped") -> list[str]:
    """The warning for a query that needs whole upstream commits (``uses``: what it does with
    them; ``reason``: what a split commit costs it, ``whole``: what whole ones guarantee; by
    default a watermark's) and reads ``source`` with a limit; none without one."""
    limit = (f"max_files_per_trigger: {max_files}" if max_files else
             f"max_bytes_per_trigger: {max_bytes}" if max_bytes else "")
    if not limit:
        return []
    return [f"{table} {uses} and reads {source} with {limit}: {reason}; without the "
            f"limit each micro-batch reads whole upstream commits and {whole} (keep the limit "
            "only if every upstream commit is one file)"]


def describe_seconds(seconds: float) -> str:
    """A span for people: ``2 days 3 hours``, ``45 minutes``, ``12 seconds``."""
    left = round(seconds)
    parts = []
    for unit, size in (("day", 86_400), ("hour", 3600), ("minute", 60), ("second", 1)):
        n, left = divmod(left, size)
        if n:
            parts.append(f"{n} {unit}{'s' if n > 1 else ''}")
        if len(parts) == 2:
            break
    return " ".join(parts) or "0 seconds"
