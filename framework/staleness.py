"""Rows written under an older spec.

A table's rows were computed by the spec parts that decide their content (a column's
expression, a quarantine rule, the dedup keys, an aggregate's window; not a description or a
layout): :meth:`TableSpec.stale_parts <framework.config.model.TableSpec.stale_parts>`. Each job
records them in its Delta table's property ``medallion.spec.written`` before it writes a row,
as every value each part has had while rows were written (a part changed between runs is
recorded with both values, so a kill never hides a change). ``medallion refresh`` removes the
property with the rows; the rebuild records the spec it runs with.

``medallion validate`` compares the record with the spec now (:func:`stale_changes`): a part
changed, added or removed since rows were written means rows only a refresh recomputes, and it
says so, naming the command. A table with no record (written before records were kept) is not
warned about.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from framework.delta import is_delta_table, set_properties, table_properties

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from framework.config.model import ProjectConfig, Table

SPEC_WRITTEN = "medallion.spec.written"  # table property: {part: [value, ...]} of the rows

Written = dict[str, list[str]]


def recorded(spark: SparkSession, location: str) -> Written | None:
    """What the table at ``location`` records its rows were written with; None when nothing
    (or no Delta table)."""
    if not is_delta_table(spark, location):
        return None
    text = table_properties(spark, location).get(SPEC_WRITTEN)
    if not text:
        return None
    data = json.loads(text)
    return {str(k): [str(v) for v in values] for k, values in data.items()}


def merged(written: Written | None, parts: dict[str, str]) -> Written:
    """``written`` with each of ``parts`` added to the values its part has had."""
    out = {k: list(v) for k, v in (written or {}).items()}
    for part, value in parts.items():
        values = out.setdefault(part, [])
        if value not in values:
            values.append(value)
    return {k: out[k] for k in sorted(out)}


def initial(parts: dict[str, str]) -> dict[str, str]:
    """The property a table made new records ``parts`` (a spec's :meth:`stale_parts`) with, at
    its creation (:func:`framework.delta.create_table`'s ``new_properties``): then
    :func:`record` finds them there and commits nothing."""
    return {SPEC_WRITTEN: json.dumps(merged(None, parts), sort_keys=True)}


def record(spark: SparkSession, location: str, parts: dict[str, str]) -> bool:
    """Add ``parts`` (a spec's :meth:`stale_parts`) to what the table at ``location`` records,
    before its job writes a row: one commit when something is new, else none (False)."""
    written = recorded(spark, location)
    now = merged(written, parts)
    if written is not None and now == written:
        return False
    set_properties(spark, location, {SPEC_WRITTEN: json.dumps(now, sort_keys=True)})
    return True


@dataclass(frozen=True)
class StaleChange:
    """One spec part whose rows differ from what the spec now computes."""

    part: str
    was: tuple[str, ...]  # the values rows were written with, other than the spec's now
    now: str | None  # the spec's value now; None: the spec no longer has the part

    def describe(self) -> str:
        was = " and ".join(repr(v) for v in self.was)
        if not self.was:
            return f"{self.part} is new ({self.now!r}): rows written before it never had it"
        if self.now is None:
            return f"{self.part} was {was} and is no longer in the spec"
        return f"{self.part} was {was}, the spec now says {self.now!r}"


def stale_changes(written: Written | None, parts: dict[str, str]) -> list[StaleChange]:
    """The parts whose rows were written with another value than the spec's now (or without
    the part, or with one the spec no longer has), in part order; none when nothing was recorded."""
    if written is None:
        return []
    changes = []
    for part in sorted(set(written) | set(parts)):
        had, now = written.get(part, []), parts.get(part)
        others = tuple(v for v in had if v != now)
        if others or (now is not None and not had):
            changes.append(StaleChange(part, others, now))
    return changes


def stale_tables(spark: SparkSession, project: ProjectConfig
                 ) -> list[tuple[Table, list[StaleChange]]]:
    """Each configured table whose rows were written with spec parts it no longer has, with
    those parts; in flow order."""
    found = []
    for table in project.in_flow_order(project.tables):
        parts = table.spec.stale_parts()
        if not parts:
            continue
        changes = stale_changes(recorded(spark, table.location), parts)
        if changes:
            found.append((table, changes))
    return found


def refresh_command(project: ProjectConfig, table: Table) -> str:
    """The command that recomputes ``table``'s rows: ``--downstream`` when tables that hold
    rows of their own read it."""
    readers = [t for t in project.fed_by([table])
               if (t.layer, t.name) != (table.layer, table.name)
               and t.spec.rebuild(t) is not None]
    return f"medallion refresh {table.layer.value}.{table.name}" + \
        (" --downstream" if readers else "")
