"""Rows held for a key another table lacks, and their release (``references`` with ``hold``).

A batch appends the rows it holds to ``<table>_held``: the table's columns, ``_held_by`` (the
checks holding the row), ``_held_at`` and ``_held_in`` (the batch), in the batch's tagged commit
(:mod:`silver.batch`). At the start of each run of the table, before its query, :func:`release`
takes the held rows whose keys every holding check's table now has, appends them to the table
(their columns as they were held: their event time too), and removes them from ``_held``; a
row still missing a key after the check's ``max_hold`` goes to the quarantine instead, with the
reason.

Exactly once: a release is named by the version of the held table it read, ``release:<v>``.
Its append to the table (noting the referenced tables' versions it judged by and the moment it
judged at), its append to the quarantine, and its rewrite of the held rows' batches are tagged
with that name, in that order. A run first looks for the table's newest release; if the held
table has no rewrite of that name, the release was stopped half way and is completed: the held
table read at version ``v`` again and the note give the same rows, what was written is not
written again, and the rewrite removes those rows from the held table as it is now.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from framework.config.checks import HELD, HELD_AT, HELD_BY, HELD_IN, CheckAction, References
from framework.config.model import Table
from framework.delta import (
    BatchCommits,
    batch_commit,
    batch_commit_note,
    create_table,
    is_delta_table,
    last_tagged_batch,
    latest_commit,
    read_table,
    replace_rows,
)
from framework.eventtime import interval_seconds
from framework.identifiers import quote
from silver.batch import quarantine_columns

RELEASER = "release"


def held_schema(rows: StructType) -> StructType:
    """The held table's columns: the table's, then why, since when and from which batch."""
    return StructType([*rows.fields,
                       StructField(HELD_BY, ArrayType(StringType())),
                       StructField(HELD_AT, TimestampType()),
                       StructField(HELD_IN, LongType())])


def create_held(spark: SparkSession, table: Table, rows: StructType) -> None:
    """Create ``<table>_held`` unless it exists (by the batch that held its rows)."""
    create_table(spark, table.qualified(HELD), held_schema(rows),
                 table.companion_location(HELD), partition_by=[HELD_IN],
                 comment=f"Rows of {table.name} held until the keys they reference arrive")


def hold_checks(checks: list[References]) -> list[References]:
    return [c for c in checks if c.action is CheckAction.HOLD]


def release(spark: SparkSession, table: Table, checks: list[References],
            quarantine: str | None, log: Any) -> dict[str, int]:
    """Complete a release a stop left unfinished, then release the held rows whose keys have
    arrived and quarantine those held too long (see the module's text): the rows released and
    expired."""
    figures = {"released_rows": 0, "expired_rows": 0}
    location = table.companion_location(HELD)
    if not is_delta_table(spark, location):
        return figures
    last = last_tagged_batch(spark, table.location, RELEASER)
    unfinished = last is not None and batch_commit(spark, location, RELEASER, last) is None
    for finishing in ([True] if unfinished else []) + [False]:
        if finishing:
            assert last is not None
            name = last
        else:  # (read after the unfinished one is completed: its rows are gone then)
            current = latest_commit(spark, location)
            assert current is not None
            name = current.version
        done = _release(spark, table, checks, quarantine, name, log.bind(finishing=finishing))
        if any(done.values()):
            log.info("silver.held.released", release=name, finishing=finishing, **done)
        for k, v in done.items():
            figures[k] += v
    return figures


def _release(spark: SparkSession, table: Table, checks: list[References],
             quarantine: str | None, name: int, log: Any) -> dict[str, int]:
    """Release ``name``: what the held table held at version ``name`` decides, written once."""
    held = read_table(spark, table.companion_location(HELD), version=name).persist()
    try:
        if held.isEmpty():
            return {"released_rows": 0, "expired_rows": 0}
        judged = _judged_by(spark, table, checks, name)
        marked = _marked(spark, held, table, checks, judged)
        return _write(spark, table, marked, held.columns, quarantine, name, judged, log)
    finally:
        held.unpersist()


def _judged_by(spark: SparkSession, table: Table, checks: list[References],
               name: int) -> dict[str, str]:
    """What release ``name`` judges by: each check's table version (``-``: none) and the
    moment (``at``): those a stopped release noted in its append, else the current ones."""
    note = batch_commit_note(spark, table.location, RELEASER, name)
    if note:
        return dict(part.split("=", 1) for part in note.split(";"))
    judged = {"at": str(int(datetime.now(UTC).timestamp()))}
    for check in checks:
        ref = check.references
        where = table.env.path("tables", ref.layer, ref.table)
        commit = latest_commit(spark, where) if is_delta_table(spark, where) else None
        judged[check.check_name] = "-" if commit is None else str(commit.version)
    return judged


def _marked(spark: SparkSession, held: DataFrame, table: Table, checks: list[References],
            judged: dict[str, str]) -> DataFrame:
    """``held`` with ``_ready`` (every holding check's key has arrived) and ``_expired`` (a
    check still missing its key past its ``max_hold``)."""
    at = datetime.fromtimestamp(int(judged["at"]), UTC).replace(tzinfo=None)
    missing_any: Column = F.lit(False)
    expired: Column = F.lit(False)
    for i, check in enumerate(checks):
        ref, flag = check.references, f"_missing_{i}"
        version = judged.get(check.check_name, "-")
        holds = F.array_contains(HELD_BY, check.check_name) & F.col(ref.column).isNotNull()
        if version == "-":
            held = held.withColumn(flag, holds)
        else:
            keys = read_table(spark, table.env.path("tables", ref.layer, ref.table),
                              version=int(version)).select(
                F.col(ref.target_key).alias(ref.column)).distinct() \
                .withColumn("_known", F.lit(True))
            held = held.join(keys, on=ref.column, how="left") \
                .withColumn(flag, holds & F.col("_known").isNull()).drop("_known")
        limit = F.lit(at) - F.expr(f"INTERVAL {interval_seconds(check.max_hold)} SECONDS")
        missing_any = missing_any | F.col(flag)
        expired = expired | (F.col(flag) & (F.col(HELD_AT) < limit))
    return held.withColumn("_ready", ~missing_any).withColumn("_expired", expired)


def _write(spark: SparkSession, table: Table, marked: DataFrame, columns: list[str],
           quarantine: str | None, name: int, judged: dict[str, str], log: Any) -> dict[str, int]:
    """The release's three writes, each once (see the module's text)."""
    commits = BatchCommits(spark)
    commits.writer_id, commits.replayable = RELEASER, range(name, name + 1)
    marked = marked.persist()
    try:
        row = marked.agg(F.count_if("_ready").alias("ready"),
                         F.count_if(~F.col("_ready") & F.col("_expired")).alias("expired"),
                         F.collect_set(F.when(F.col("_ready") | F.col("_expired"), F.col(HELD_IN)))
                         .alias("batches")).first()
        assert row is not None
        if not row["batches"]:
            return {"released_rows": 0, "expired_rows": 0}
        log.info("silver.held.releasing", release=name, ready_rows=int(row["ready"]),
                 expired_rows=int(row["expired"]), batches=len(row["batches"]))
        rows = [c for c in columns if c not in (HELD_BY, HELD_AT, HELD_IN)]
        note = ";".join(f"{k}={v}" for k, v in sorted(judged.items()))
        commits.append(marked.where("_ready").select(*rows), table.location, name, note=note)
        if row["expired"] and quarantine is not None:
            commits.append(marked.where(~F.col("_ready") & F.col("_expired")).select(
                *quarantine_columns(
                    F.to_json(F.struct(*[F.col(c) for c in rows])),
                    F.array_union(HELD_BY, F.array(F.lit("held_past_max_hold"))),
                    F.col(HELD_IN))), quarantine, name)
        # the held rows of those batches now, but those released or expired (a stop may have
        # left other commits since version ``name``: rows are told apart by their content)
        batches = ", ".join(str(int(b)) for b in sorted(row["batches"]))
        where = f"{quote(HELD_IN)} IN ({batches})"
        gone = marked.where(F.col("_ready") | F.col("_expired")).select(*columns)
        now = read_table(spark, table.companion_location(HELD)).where(where)
        replace_rows(now.exceptAll(gone), table.companion_location(HELD), where,
                     tag=f"{RELEASER}:{name}")
        return {"released_rows": int(row["ready"]), "expired_rows": int(row["expired"])}
    finally:
        marked.unpersist()
