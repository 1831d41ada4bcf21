"""The state of each configured table: kind, rows, Delta version, checkpoint, backlog (files
waiting in landing, or for a Kafka feed the offsets per partition and the lag).

Two readers give one :class:`TableStatus`:

- :func:`logged_status` reads what the lake's files say, without Spark: a Delta table's log
  (:mod:`framework.deltalog`), a parquet table's footers, the checkpoint, landing. It is what
  ``medallion status`` runs on a local or ADLS root: no JVM, no catalog, no lake lease. Where
  the files cannot say (a view's rows, a table whose log holds no row counts, a parquet table
  on ADLS) the rows are None, unless it is asked to count them with Spark; a Kafka feed's
  offsets are read with Spark (the offsets reached are in its rows).
- :func:`table_status` asks a live Spark session's catalog: the rows by ``count()``, the
  version by ``DESCRIBE HISTORY``. The report uses it, and ``status`` for a root Spark alone
  reaches (``hdfs://``, ``dbfs:/``, ADLS with the cluster's credentials).

A table whose rows can wait for a key another table lacks (silver's ``references`` with ``hold``)
also says how many rows its ``<table>_held`` holds now and since when the oldest waits
(:func:`held_rows`), read the way its other figures are: from the files, or with Spark.

Works on any lake: a table not created yet is reported as missing, a view (a gold mart) with
its rows and no version, a table that is not Delta (a bucketed parquet table) without one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from framework.checkpoint import last_committed_batch
from framework.config.checks import HELD, HELD_AT
from framework.config.model import Stored, Table
from framework.identifiers import quote_name
from framework.layers import offsets_of
from framework.storage import UPLOADING_SUFFIX, local_path, scheme_of, storage_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A Spark session started on first use (then the same one): logged_status gets one if it needs.
Session = Callable[[], "SparkSession"]


@dataclass(frozen=True)
class HeldRows:
    """The rows waiting in a table's ``<table>_held`` now, and when the oldest was held (UTC;
    None: none waits)."""

    rows: int
    oldest: datetime | None


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
    held: HeldRows | None = None  # a table that can hold rows, once its held table is made

    @property
    def exists(self) -> bool:
        return self.kind != "missing"


def table_status(spark: SparkSession, table: Table) -> TableStatus:
    """The table's state as a live session's catalog gives it (rows counted by a query)."""
    from framework.delta import latest_commit

    kind, rows, version, last_commit = "missing", None, None, None
    if spark.catalog.tableExists(table.full_name):
        kind = _kind(spark, table.full_name)
        rows = spark.table(table.full_name).count()
        commit = latest_commit(spark, table.full_name) if kind == "delta" else None
        if commit is not None:
            version, last_commit = commit.version, commit.timestamp
    read = offsets_of(table) if kind != "missing" else None
    offsets = read(spark) if read is not None else None
    status = _with_progress(table, kind, rows, version, last_commit, offsets, spark)
    return replace(status, held=held_rows(table, spark))


def logged_status(table: Table, session: Session, *, count: bool = False) -> TableStatus:
    """The table's state as the lake's files say it, for a root :func:`without_spark` says they
    can be read from. ``session`` is called only for what the files cannot say: a Kafka feed's
    offsets, and with ``count`` the rows of a view, of a table whose log holds no row counts (read
    whole), of a parquet table whose footers are out of reach (then :func:`table_status`)."""
    from framework.deltalog import read_state

    stored = table.spec.stored()
    kind, rows, version, last_commit = "missing", None, None, None
    if stored is Stored.DELTA:
        state = read_state(table.location, table.env)
        if state is not None:
            kind, rows, version, last_commit = ("delta", state.rows, state.version,
                                                state.last_commit)
    elif stored is Stored.PARQUET:
        if storage_for(table.location, table.env).exists(table.location):
            kind, rows = "parquet", _footer_rows(table.location)
    elif _upstream_exist(table):
        # A view lives in the catalog only: the files say it can be (what it reads is
        # there), the catalog that it is (with count).
        kind = "view"
    if count and kind == "delta" and rows is None:
        from framework.delta import read_table

        rows = read_table(session(), table.location).count()
    elif count and kind != "missing" and rows is None:
        return table_status(session(), table)
    read = offsets_of(table) if kind != "missing" else None
    offsets = read(session()) if read is not None else None
    status = _with_progress(table, kind, rows, version, last_commit, offsets, None)
    return replace(status, held=held_rows(table))


# The rows held now and the oldest's time (Spark's SQL and DataFusion's alike).
_HELD = f'SELECT count(*) AS n, min("{HELD_AT}") AS oldest FROM t'


def held_rows(table: Table, spark: SparkSession | None = None) -> HeldRows | None:
    """What the table's ``<table>_held`` holds now (None: the table holds no rows, or has not
    made its held table yet): read without Spark (``spark`` None, a root :func:`without_spark`
    says can be), else with ``spark``."""
    if not table.spec.holds:
        return None
    location = table.companion_location(HELD)
    if spark is None:
        from framework.deltalog import query

        rows = query(location, table.env, _HELD)
        if not rows:
            return None
        found = rows[0]
    else:
        from framework.delta import is_delta_table, read_table

        if not is_delta_table(spark, location):
            return None
        read_table(spark, location).createOrReplaceTempView("_medallion_held")
        first = spark.sql(_HELD.replace('"', "`").replace(" FROM t", " FROM _medallion_held")) \
            .first()
        assert first is not None  # (an aggregate without grouping: one row)
        found = first.asDict()
    oldest = found["oldest"]
    # (delta-rs gives an aware datetime; PySpark a naive one in this process's time zone)
    return HeldRows(int(found["n"]), oldest.astimezone(UTC) if oldest is not None else None)


def without_spark(table: Table) -> bool:
    """Whether :func:`logged_status` can read the table's files without Spark (a local root,
    or ADLS with the environment's credentials)."""
    from framework.deltalog import readable

    return readable(table.env)


def _with_progress(table: Table, kind: str, rows: int | None, version: int | None,
                   last_commit: datetime | None, offsets: list[dict[str, Any]] | None,
                   spark: SparkSession | None) -> TableStatus:
    """The status with the checkpoint's last batch and the backlog in landing (through
    ``spark``'s file system when given one, else by the path's scheme)."""
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
    return TableStatus(table.full_name, kind, rows, version, batch if batch >= 0 else None,
                       pending, pending_bytes, skipped, tuple(offsets or ()), last_commit)


def _upstream_exist(table: Table) -> bool:
    """Whether every table a view reads is in the lake (its folder: a Delta table's holds its
    log from its creation on, a parquet table's its files)."""
    for layer, name in table.spec.upstream():
        location = table.env.path("tables", layer.value, name)
        if not storage_for(location, table.env).exists(location):
            return False
    return True


def _footer_rows(location: str) -> int | None:
    """The rows of a parquet table's data files, from their footers (the files Spark reads:
    none under a folder whose name starts with '.' or '_', but a partition's ``_c=v``); None
    when pyarrow is not installed or the table is not on a local disk."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    if scheme_of(location) not in ("", "file"):
        return None
    rows = 0
    for folder, dirs, files in os.walk(local_path(location)):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_")) or "=" in d]
        for name in files:
            if not name.startswith((".", "_")) and not name.endswith(".crc"):
                rows += pq.read_metadata(os.path.join(folder, name)).num_rows
    return rows


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
