"""The state of each configured table: rows, Delta version, checkpoint, backlog."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from framework.checkpoint import last_committed_batch
from framework.config.model import Table
from framework.storage import storage_for


@dataclass(frozen=True)
class TableStatus:
    table: str
    exists: bool
    rows: int | None
    version: int | None
    last_batch: int | None
    pending_files: int | None
    pending_bytes: int | None


def table_status(spark: SparkSession, table: Table) -> TableStatus:
    exists = bool(spark.catalog.tableExists(table.full_name))
    rows = version = None
    if exists:
        rows = spark.table(table.full_name).count()
        history = spark.sql(f"DESCRIBE HISTORY {table.full_name} LIMIT 1").collect()
        version = int(history[0]["version"]) if history else None
    batch = last_committed_batch(table.checkpoint, table.env)
    pending = pending_bytes = None
    backlog = table.spec.backlog_path(table)
    if backlog is not None:
        store = storage_for(backlog, table.env)
        waiting = [f for f in store.list_files(backlog)
                   if not f.path.rsplit("/", 1)[-1].startswith((".", "_"))
                   ] if store.exists(backlog) else []
        pending, pending_bytes = len(waiting), sum(f.size for f in waiting)
    return TableStatus(table.full_name, exists, rows, version, batch if batch >= 0 else None,
                       pending, pending_bytes)
