"""The state of each configured table: kind, rows, Delta version, checkpoint, backlog (files
waiting in landing, or for a Kafka feed the offsets per partition and the lag).

Works on any lake: a table not created yet is reported as missing, a view (a gold mart) with
its rows and no version, a table that is not Delta (a bucketed parquet table) without one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession

from framework.checkpoint import last_committed_batch
from framework.config.model import Table
from framework.identifiers import quote_name
from framework.storage import UPLOADING_SUFFIX, storage_for


@dataclass(frozen=True)
class TableStatus:
    table: str
    kind: str  # delta, view, parquet...; "missing" when the catalog has no such table
    rows: int | None
    version: int | None
    last_batch: int | None
    pending_files: int | None
    pending_bytes: int | None
    # Files in the backlog that are never read: Spark's file source skips names that start
    # with '.' or '_' (in-flight uploads, by convention; this product's own are left out).
    skipped: tuple[str, ...] = ()
    # A table fed by Kafka: per topic and partition, the offset reached, the latest, the lag
    offsets: tuple[dict[str, Any], ...] = ()
    last_commit: datetime | None = None  # of a Delta table (naive: the local time)

    @property
    def exists(self) -> bool:
        return self.kind != "missing"


def table_status(spark: SparkSession, table: Table) -> TableStatus:
    kind, rows, version, last_commit = "missing", None, None, None
    if spark.catalog.tableExists(table.full_name):
        kind = _kind(spark, table.full_name)
        rows = spark.table(table.full_name).count()
        if kind == "delta":
            history = spark.sql(f"DESCRIBE HISTORY {quote_name(table.full_name)} LIMIT 1").collect()
            version = int(history[0]["version"]) if history else None
            last_commit = history[0]["timestamp"] if history else None
    batch = last_committed_batch(table.checkpoint, storage_for(table.checkpoint, table.env,
                                                               spark))
    pending = pending_bytes = None
    backlog = table.spec.backlog_path(table)
    if backlog is not None:
        store = storage_for(backlog, table.env, spark)
        listed = list(store.list_files(backlog)) if store.exists(backlog) else []
        waiting = [f for f in listed if not _hidden(f.path)]
        pending, pending_bytes = len(waiting), sum(f.size for f in waiting)
        skipped = tuple(sorted(f.path for f in listed if _hidden(f.path)
                               and not f.path.endswith(UPLOADING_SUFFIX)))
    else:
        skipped = ()
    offsets = table.spec.source_offsets(spark, table) if kind != "missing" else None
    return TableStatus(table.full_name, kind, rows, version, batch if batch >= 0 else None,
                       pending, pending_bytes, skipped, tuple(offsets or ()), last_commit)


def _hidden(path: str) -> bool:
    return path.rsplit("/", 1)[-1].startswith((".", "_"))


def _kind(spark: SparkSession, name: str) -> str:
    """``view`` for a view, else the table's provider (``delta``, ``parquet``...)."""
    found = spark.catalog.getTable(name)
    if (found.tableType or "").upper() == "VIEW":
        return "view"
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {quote_name(name)}").collect()
    provider = next((r["data_type"] for r in rows if r["col_name"] == "Provider"), None)
    return str(provider or "table").lower()
