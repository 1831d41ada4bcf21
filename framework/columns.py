"""The columns a table's spec declares, known without data and without Spark.

A reader of a spec knows its table's columns from the spec and from those of the tables it reads:
bronze's from its DDL and the columns it adds, silver's from its ``columns`` (or its source's),
gold's from its output. Each layer says how (:meth:`TableSpec.declared_columns`); when
``medallion validate`` loads the configuration, even with ``--no-spark``, every key of a spec
naming a column of a table it reads is checked against them (:meth:`TableSpec.column_problems`):
what would otherwise fail only when the table runs. A table whose columns cannot be known so (a
transform may add some, a log of records' value) declares none, and what reads it is not checked
here (Spark's planning in :mod:`framework.sqlcheck` still is, with ``validate``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from framework.errors import ConfigError

LISTED = 12  # columns named in a message at most
_NAME = re.compile(r"\s*(?:`(?P<quoted>(?:[^`]|``)+)`|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))\s*:?\s*")
_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PAIRS = {"(": ")", "<": ">"}


class TimeKind(StrEnum):
    """Whether a column's type can hold a watermark's event time."""

    TIMESTAMP = "timestamp"  # TIMESTAMP (TIMESTAMP_LTZ): Spark's event time
    OTHER = "other"  # a type Spark refuses as event time (DATE, STRING, TIMESTAMP_NTZ...)
    UNKNOWN = "unknown"  # not known before the table runs (an expression's, say)


TIMESTAMP_TYPES = frozenset({"timestamp", "timestamp_ltz"})
# Spark's types that are no event time (a struct may be a window's: left to Spark)
OTHER_TYPES = frozenset({
    "boolean", "tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long",
    "float", "real", "double", "decimal", "dec", "numeric", "string", "varchar", "char",
    "character", "binary", "date", "timestamp_ntz", "interval", "array", "map", "variant",
    "void"})


class Column(NamedTuple):
    """A declared column: its name and its Spark SQL type as written, in lower case without
    spaces (``decimal(10,2)``); None when the type is not known before the table runs."""

    name: str
    type: str | None = None


@dataclass(frozen=True)
class Columns:
    """A table's declared columns (``table``: its name in messages), in order. Names are
    matched as Spark resolves them by default: regardless of case."""

    table: str
    fields: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.fields]

    def get(self, name: str) -> Column | None:
        """The column named ``name`` (in any case), or None."""
        return next((c for c in self.fields if c.name.lower() == name.lower()), None)

    def missing(self, key: str, name: str, hint: str = "") -> ConfigError | None:
        """The problem of ``key`` naming ``name`` when it is not one of the columns (``hint``:
        what else to say), else None."""
        if self.get(name) is not None:
            return None
        return ConfigError(f"expected a column of {self.table} ({self.listed(name)}), found "
                           f"{name!r}{hint}", key=key)

    def listed(self, near: str = "") -> str:
        """The columns as a message lists them, the closest to ``near`` first when one is."""
        names = self.names
        shown = ", ".join(names[:LISTED]) + (f", ... ({len(names)} in all)"
                                             if len(names) > LISTED else "")
        closest = difflib.get_close_matches(near, names, n=1, cutoff=0.6) if near else []
        return (f"closest: {closest[0]}; " if closest else "") + f"columns: {shown or 'none'}"


def normal_type(text: str) -> str:
    """A Spark SQL type as :class:`Column` keeps it: lower case, without spaces."""
    return re.sub(r"\s+", "", text).lower()


def time_kind(column: Column) -> TimeKind:
    """Whether ``column`` can be a watermark's event time, as far as its declared type says."""
    if column.type is None:
        return TimeKind.UNKNOWN
    base = _TYPE.match(column.type)
    word = base.group(0) if base else ""
    if word in TIMESTAMP_TYPES:
        return TimeKind.TIMESTAMP
    return TimeKind.OTHER if word in OTHER_TYPES else TimeKind.UNKNOWN


def ddl_columns(ddl: str) -> tuple[Column, ...] | None:
    """The columns of a DDL of columns (``id BIGINT, name STRING``), read without Spark; None
    when it is not one this reading understands (Spark's parser reports what is wrong)."""
    columns = []
    for part in _split(ddl):
        m = _NAME.match(part)
        rest = part[m.end():] if m else ""
        kind = _TYPE.match(rest)
        if m is None or kind is None:
            return None
        end = _balanced(rest, kind.end())
        if end is None:
            return None
        name = m["quoted"].replace("``", "`") if m["quoted"] else m["plain"]
        columns.append(Column(name, normal_type(rest[:end])))
    return tuple(columns) or None


def _split(text: str) -> list[str]:
    """``text`` cut at its commas outside brackets, quotes and backticks."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "`'\"":
            quote = ch
        elif ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (p.strip() for p in parts) if p]


def _balanced(text: str, at: int) -> int | None:
    """Where the brackets opening at ``at`` in ``text`` (if any) close; None if they do not."""
    i = at
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text) or text[i] not in _PAIRS:
        return at
    depth = 0
    for j in range(i, len(text)):
        if text[j] in _PAIRS:
            depth += 1
        elif text[j] in _PAIRS.values():
            depth -= 1
            if depth == 0:
                return j + 1
    return None
