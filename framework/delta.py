"""The Delta operations the layers use, one function each; the layers reach Delta through
this module (in the spirit of delta-spark's ``tables.py``).

Everything here is Spark SQL or the DataFrame API, so that a classic session and a Spark
Connect one run it alike: delta-spark's Python ``DeltaTable`` needs Delta's Connect plugin on
the server, which Spark Connect servers lack by default. A table is given by its location;
where a parameter is called ``table``, by its catalog name (``catalog.schema.table``) as well.
Appends are tagged with a writer's batch (:func:`append`) and so idempotent with
:func:`batch_commit` and :class:`BatchCommits`. A table's streaming source and sink
(``readStream``/``writeStream``) stay with the job that runs the query (:mod:`framework.job`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from framework.identifiers import quote, quote_all, quote_name, quote_path
from framework.logging import get_logger

if TYPE_CHECKING:
    from framework.storage.base import Storage

# Table property: record the change data feed. For an append-only table this costs nothing on
# write (a commit's inserted rows are its added files); a batch's rows can be read back from its
# own commit.
CHANGE_FEED = "delta.enableChangeDataFeed"
# The session setting Delta writes into each commit's user metadata (SQL statements take no option)
COMMIT_NOTE = "spark.databricks.delta.commitInfo.userMetadata"


def literal_rows(spark: SparkSession, rows: Sequence[Sequence[Any]],
                 schema: StructType) -> DataFrame:
    """``rows`` as a DataFrame of ``schema``, built in the JVM from one JSON literal.

    ``createDataFrame`` on a Python list makes a Python RDD, and every action on it starts
    Python workers to hand the rows over: seconds on a busy machine for a few rows. A literal
    per value is no better beyond a few rows: Spark analyses and optimises a plan that grows
    with them (about 13 s for 200 rows of 12 columns). One JSON text parsed with the schema
    (``from_json``) costs the same for any number of rows; the framework's own small tables
    (the file ledger) are made this way."""
    payload = json.dumps([dict(zip(schema.names, map(_json_value, row), strict=True))
                          for row in rows])
    # FAILFAST: a value that does not fit its column fails the action, not a null row.
    parsed = F.from_json(F.lit(payload), ArrayType(schema), {"mode": "FAILFAST"})
    return spark.range(1, numPartitions=1).select(F.inline(parsed))


def _json_value(value: Any) -> Any:
    """``value`` as JSON: a naive datetime is local time, as PySpark takes it, and written
    with its offset so that Spark reads the same instant whatever its session time zone."""
    if isinstance(value, datetime):
        return value.astimezone().isoformat()
    if isinstance(value, date | Decimal):
        return str(value)
    return value


def sql_string(value: str) -> str:
    """``value`` as a SQL string literal (quotes and backslashes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def schema_ddl(schema: StructType) -> str:
    """The columns of ``schema`` as the column list of a ``CREATE TABLE``: every name quoted,
    nullability and comments kept. Made here, not by ``StructType.toDDL()``, which asks the
    thread's active session (none on a thread of a Spark Connect client)."""
    return ", ".join(_field_ddl(f, " ") for f in schema.fields)


def _field_ddl(field: StructField, sep: str) -> str:
    text = f"{quote(field.name)}{sep}{_type_ddl(field.dataType)}"
    if not field.nullable:
        text += " NOT NULL"
    comment = field.metadata.get("comment")
    if comment:
        text += f" COMMENT {sql_string(str(comment))}"
    return text


def _type_ddl(kind: DataType) -> str:
    if isinstance(kind, StructType):
        return "STRUCT<" + ", ".join(_field_ddl(f, ": ") for f in kind.fields) + ">"
    if isinstance(kind, ArrayType):
        return f"ARRAY<{_type_ddl(kind.elementType)}>"
    if isinstance(kind, MapType):
        return f"MAP<{_type_ddl(kind.keyType)}, {_type_ddl(kind.valueType)}>"
    return kind.simpleString()


def create_table(
    spark: SparkSession,
    name: str,
    schema: StructType,
    location: str,
    *,
    partition_by: Sequence[str] = (),
    cluster_by: Sequence[str] = (),
    comment: str = "",
    properties: Mapping[str, str] | None = None,
    new_properties: Mapping[str, str] | None = None,
    rebuild: bool = False,
) -> bool:
    """Create a Delta catalog table at ``location`` unless it exists (idempotent); True when
    created now.

    ``properties``: the table has them, made now or registered again over a folder that holds
    its log (the catalog lost it; then the log's other properties stay). ``new_properties``:
    only a table whose first commit is this one starts with them (what would otherwise take
    a commit of its own right after); a log found there keeps its own.

    ``rebuild``: ``medallion refresh`` emptied the table to rebuild it: if its columns or
    partitioning are not those asked (the spec changed them), it is made again (``CREATE OR
    REPLACE``, which keeps its Delta history); a table holding rows is never replaced.
    ``name`` is a validated ``catalog.schema.table``; SQL, as Delta's builder API does not take
    catalog-qualified names. The catalog is asked first: ``CREATE TABLE IF NOT EXISTS`` on an
    existing Delta table still loads its log, which costs far more.
    """
    replace = rebuild and is_delta_table(spark, location) \
        and _other_layout(spark, location, schema, partition_by, cluster_by) \
        and read_table(spark, location).isEmpty()
    if not replace and spark.catalog.tableExists(name):
        return False
    found = False  # a Delta log already there: the table registered again over its folder
    if not replace:
        clear_unfinished_create(spark, location)
        found = _holds_log(spark, location)
    asked = dict(properties or {})
    if not found and not replace:
        asked = {**(new_properties or {}), **asked}
    verb = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE IF NOT EXISTS"
    parts = [f"{verb} {quote_name(name)} ({schema_ddl(schema)}) USING DELTA"]
    if partition_by:
        parts.append(f"PARTITIONED BY ({quote_all(partition_by)})")
    if cluster_by:  # liquid clustering: OPTIMIZE lays the data out by these columns
        parts.append(f"CLUSTER BY ({quote_all(cluster_by)})")
    if comment:
        parts.append(f"COMMENT {sql_string(comment)}")
    parts.append(f"LOCATION {sql_string(location)}")
    if asked and not found:
        parts.append(f"TBLPROPERTIES ({_assignments(asked)})")
    spark.sql(" ".join(parts))
    # Over a log, Delta takes properties only if they are exactly the log's (it refuses a
    # subset): the table is registered as its log is, then given those asked it lacks.
    if found and asked:
        have = table_properties(spark, location)
        lacking = {k: v for k, v in asked.items() if have.get(k) != v}
        if lacking:
            set_properties(spark, location, lacking)
    return True


def _other_layout(spark: SparkSession, location: str, schema: StructType,
                  partition_by: Sequence[str], cluster_by: Sequence[str] = ()) -> bool:
    """Whether the Delta table at ``location`` has other columns (names and types, in order),
    another partitioning or other clustering columns than asked."""
    have = read_table(spark, location).schema
    if [(f.name.lower(), f.dataType.simpleString()) for f in have.fields] != \
            [(f.name.lower(), f.dataType.simpleString()) for f in schema.fields]:
        return True
    found = detail(spark, location)
    if not found:
        return False

    def lower(names: Sequence[str] | None) -> list[str]:
        return [c.lower() for c in names or []]

    return lower(found["partitionColumns"]) != lower(partition_by) or \
        lower(found.get("clusteringColumns")) != lower(cluster_by)


def detail(spark: SparkSession, table: str) -> dict[str, Any]:
    """The table's ``DESCRIBE DETAIL`` row (format, location, partition and clustering
    columns, files, size...); empty when there is none. It reconstructs the state of every
    file: where the schema is enough, :func:`read_table` costs less."""
    row = spark.sql(f"DESCRIBE DETAIL {_sql_table(table)}").first()
    return row.asDict() if row is not None else {}


def add_missing_columns(spark: SparkSession, location: str, schema: StructType) -> list[str]:
    """Add to the Delta table at ``location`` the columns of ``schema`` it lacks (nullable,
    at the end): a table made by an earlier version keeps its rows. Returns those added."""
    have = {n.lower() for n in read_table(spark, location).columns}
    missing = [f for f in schema.fields if f.name.lower() not in have]
    add_columns(spark, location, missing)
    return [f.name for f in missing]


def add_columns(spark: SparkSession, location: str, fields: Sequence[StructField]) -> None:
    """Add ``fields`` to the Delta table at ``location``, nullable, at the end (none: no commit)."""
    if fields:
        columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in fields)
        spark.sql(f"ALTER TABLE {quote_path(location)} ADD COLUMNS ({columns})")


def widen_columns(spark: SparkSession, location: str, fields: Sequence[StructField]) -> None:
    """Change each of ``fields``' type in the Delta table at ``location`` to the field's (a
    widening: the table needs ``delta.enableTypeWidening``), one commit each."""
    for f in fields:
        spark.sql(f"ALTER TABLE {quote_path(location)} ALTER COLUMN {quote(f.name)} "
                  f"TYPE {f.dataType.simpleString()}")


def clear_unfinished_create(spark: SparkSession, location: str) -> bool:
    """Remove what a ``CREATE TABLE`` killed before its first commit leaves at ``location``:
    a ``_delta_log`` folder holding nothing, or only the hidden temporary file of the commit
    being written. Delta refuses to create a table there ("not empty and also not a Delta
    table"), so every later run would fail. Anything else is left for Delta to judge. True
    when something was removed."""
    from framework.storage import clear_debris

    storage = _store(spark, location)
    log = f"{location.rstrip('/')}/_delta_log"
    if storage is None or not storage.exists(log):
        return False
    files = clear_debris(storage, location, _temporary_log_file)
    if files is None:
        return False
    storage.delete(log)
    get_logger().warning("delta.create.unfinished_cleared", location=location,
                         removed=[f.rsplit("/", 1)[-1] for f in files])
    return True


def _store(spark: SparkSession, location: str) -> Storage | None:
    """The store of ``location``: the session's file system; on Spark Connect, the local
    disk's; None for ADLS on Spark Connect (its client needs the environment's storage)."""
    from framework.errors import StorageError
    from framework.storage import storage_for

    try:
        return storage_for(location, None, spark)
    except StorageError:
        return None


def _holds_log(spark: SparkSession, location: str) -> bool:
    """Whether a ``_delta_log`` folder is at ``location`` (True where the store is unknown)."""
    storage = _store(spark, location)
    return storage is None or storage.exists(f"{location.rstrip('/')}/_delta_log")


def _temporary_log_file(path: str) -> bool:
    """Whether ``path`` is a hidden file directly in a ``_delta_log`` folder (a commit being
    written: ``.00000000000000000000.json.<uuid>.tmp``, or its checksum), however the store
    spells the folder (``file:/p``, ``/p``)."""
    folder, _, name = path.rstrip("/").rpartition("/")
    return folder.endswith("/_delta_log") and name.startswith(".")


def optimize(spark: SparkSession, name: str, zorder_by: Sequence[str] = ()) -> dict[str, Any]:
    """Compact a Delta table; a clustered table is laid out by its clustering columns, and
    ``zorder_by`` Z-orders a table that is not clustered (older Delta versions). Returns the
    operation's metrics (files added and removed)."""
    clustered = bool(detail(spark, name).get("clusteringColumns"))
    statement = f"OPTIMIZE {quote_name(name)}"
    if zorder_by and not clustered:
        statement += f" ZORDER BY ({quote_all(zorder_by)})"
    row = spark.sql(statement).first()
    metrics = row["metrics"].asDict() if row is not None else {}
    return {k: metrics[k] for k in ("numFilesAdded", "numFilesRemoved") if k in metrics} | {
        "clustered": clustered}


def append(df: DataFrame, location: str, writer_id: str | None = None,
           batch_id: int | None = None, note: str | None = None) -> None:
    """Append ``df`` to the Delta table at ``location`` in one commit; with ``writer_id``,
    tagged ``<writer_id>:<batch_id>`` in its user metadata, by which :func:`batch_commit` finds it
    (followed by `` <note>``, a word without spaces, when given: what the batch decided by, read
    back by :func:`batch_commit_note` when it is replayed).

    Delta's idempotent-write options (``txnAppId``/``txnVersion``) are not used: in Delta 4.4
    their lookup rebuilds the table's state from its log on every append. A writer that may
    replay a batch asks :func:`batch_commit` first (see :meth:`BatchCommits.written_before`)."""
    writer = df.write.format("delta").mode("append")
    if writer_id is not None:
        tag = f"{writer_id}:{batch_id}" + (f" {note}" if note else "")
        writer = writer.option("userMetadata", tag)
    writer.save(location)


def overwrite(df: DataFrame, location: str, *, new_schema: bool = False) -> None:
    """Replace every row of the Delta table at ``location`` with ``df``, in one commit; with
    ``new_schema``, its columns as well (``overwriteSchema``)."""
    df.write.format("delta").mode("overwrite") \
        .option("overwriteSchema", str(new_schema).lower()).save(location)


def replace_rows(df: DataFrame, location: str, where: str, tag: str | None = None) -> None:
    """Replace the rows matching ``where`` in the Delta table at ``location`` with ``df``, in
    one commit (``replaceWhere``); every row of ``df`` must match ``where``.

    On a predicate over the partition columns Delta drops the matching files unread: the
    cheapest update of a whole partition, where a MERGE of the same rows scans the table for
    matches and rewrites what it touched, a dozen Spark jobs."""
    writer = df.write.format("delta").mode("overwrite").option("replaceWhere", where)
    if tag:  # (a writer's batch, as append tags it: batch_commit finds it)
        writer = writer.option("userMetadata", tag)
    writer.save(location)


def update_rows(spark: SparkSession, location: str, assignments: Mapping[str, str],
                where: str, tag: str | None = None) -> None:
    """Set ``assignments`` (column: SQL expression) on the rows matching ``where`` of the Delta
    table at ``location``, in one commit; with ``tag`` (``<writer_id>:<batch_id>``, as
    :func:`append` tags) for :func:`batch_commit` to find it. The tag is the session's commit
    note for the statement's time (SQL's UPDATE takes no write option): the caller is the
    session's only writer then (a command holding the lake's lease)."""
    sets = ", ".join(f"{quote(c)} = {e}" for c, e in assignments.items())
    statement = f"UPDATE {quote_path(location)} SET {sets} WHERE {where}"
    if tag is None:
        spark.sql(statement)
        return
    spark.conf.set(COMMIT_NOTE, tag)
    try:
        spark.sql(statement)
    finally:
        spark.conf.unset(COMMIT_NOTE)


def delete_rows(spark: SparkSession, location: str, where: str | None = None) -> None:
    """Delete the rows matching ``where`` (None: all) from the Delta table at ``location``."""
    spark.sql(f"DELETE FROM {quote_path(location)}" + (f" WHERE {where}" if where else ""))


def batch_commit(spark: SparkSession, location: str, writer_id: str, batch_id: int,
                 page: int = 10) -> int | None:
    """The version of the commit in which ``writer_id`` appended ``batch_id`` to the Delta table
    at ``location`` (found by its tag, see :func:`append`), or None if it never did.

    A writer's batches commit in order, so the history is read from the newest commit back only
    until this batch's commit, or one of an earlier batch of the same writer, shows up: a page
    for a batch just written, more only when other writers committed since."""
    found = _tagged_commit(spark, location, writer_id, batch_id, page)
    return found[0] if found is not None else None


def batch_commit_note(spark: SparkSession, location: str, writer_id: str,
                      batch_id: int) -> str | None:
    """The note ``writer_id``'s commit of ``batch_id`` at ``location`` carries (see
    :func:`append`); None without that commit or without a note."""
    found = _tagged_commit(spark, location, writer_id, batch_id)
    return found[1] if found is not None else None


def last_tagged_batch(spark: SparkSession, location: str, writer_id: str,
                      page: int = 10) -> int | None:
    """The batch of ``writer_id``'s newest tagged commit at ``location`` (see :func:`append`),
    None when it made none; the history is read from the newest commit back until one shows."""
    limit = page
    while True:
        rows = history(spark, location, limit).select("version", "userMetadata").collect()
        for row in sorted(rows, key=lambda r: -r["version"]):
            tag = (row["userMetadata"] or "").partition(" ")[0]
            writer, _, batch = tag.rpartition(":")
            if writer == writer_id and batch.isdigit():
                return int(batch)
        if len(rows) < limit:
            return None
        limit *= 4


def _tagged_commit(spark: SparkSession, location: str, writer_id: str, batch_id: int,
                   page: int = 10) -> tuple[int, str | None] | None:
    """(version, note) of the commit :func:`batch_commit` looks for, or None."""
    limit = page
    while True:
        rows = history(spark, location, limit).select("version", "userMetadata").collect()
        for row in sorted(rows, key=lambda r: -r["version"]):
            tag, _, note = (row["userMetadata"] or "").partition(" ")
            writer, _, batch = tag.rpartition(":")
            if writer == writer_id and batch.isdigit() and int(batch) <= batch_id:
                return (int(row["version"]), note or None) if int(batch) == batch_id else None
        if len(rows) < limit:  # the whole history is read
            return None
        limit *= 4


class BatchCommits:
    """The appends of one foreachBatch writer, a commit per table and micro-batch, each tagged
    with the writer and batch (:func:`append`) so that a restart finds it again.

    ``writer_id`` is the streaming query's id, kept in its checkpoint: it names the writer
    across restarts and changes when the checkpoint is reset, so a new history is never
    skipped. ``replayable`` holds the batches the checkpoint had planned but not committed
    when the run started: only these can have been written, wholly or in part, before."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.writer_id: str | None = None
        self.replayable: range = range(0)
        self._versions: dict[tuple[str, int], int] = {}

    def written_before(self, location: str, batch_id: int) -> bool:
        """Whether this batch was appended to the Delta table at ``location`` before a restart.

        Only a replayable batch can have been (the source plans each batch once, in order, and a
        failed batch fails the query rather than being retried in it); its earlier append is found
        by its commit's tag. Every other batch is appended without asking, which spares the rebuild
        of the table's state that Delta's idempotent writes (``txnAppId``) cost on every append."""
        return batch_id in self.replayable and self.version(location, batch_id) is not None

    def version(self, location: str, batch_id: int) -> int | None:
        """The version of this writer's commit of ``batch_id`` at ``location``
        (:func:`batch_commit`), None while there is none; one found is kept, so a batch asks
        the table's history once."""
        key = (location, batch_id)
        if key not in self._versions:
            version = batch_commit(self.spark, location, self._writer(), batch_id)
            if version is None:
                return None
            self._versions[key] = version
        return self._versions[key]

    def note(self, location: str, batch_id: int) -> str | None:
        """The note this batch's commit at ``location`` carries, for a replayable batch that
        made it before a restart (see :func:`append`); None otherwise."""
        if batch_id not in self.replayable:
            return None
        return batch_commit_note(self.spark, location, self._writer(), batch_id)

    def append(self, df: DataFrame, location: str, batch_id: int, *,
               checked: bool = False, note: str | None = None) -> None:
        """Append ``df`` at ``location`` as this batch's one commit, unless it was appended
        before a restart (``checked``: the caller already asked :meth:`written_before`);
        ``note``: a word the commit carries (see :func:`append`)."""
        if not checked and self.written_before(location, batch_id):
            return
        append(df, location, self._writer(), batch_id, note)

    def _writer(self) -> str:
        if self.writer_id is None:
            raise RuntimeError("the writer's query has not started: no writer id yet")
        return self.writer_id


def is_delta_table(spark: SparkSession, location: str) -> bool:
    """Whether a Delta table is at ``location``: a ``_delta_log`` folder there (the store's own
    check: a missing path or a folder of plain files is none) whose schema Delta can read (an
    empty log, left by a create cut short, is none). Spark SQL and the lake's store, so a
    classic session and a Spark Connect one alike."""
    store = _store(spark, location)
    if store is not None and not store.exists(f"{location.rstrip('/')}/_delta_log"):
        return False
    try:
        # Its schema: Delta reads the log's protocol and metadata only (DESCRIBE DETAIL also
        # reconstructs the state of every file, about a second for each new version)
        schema = read_table(spark, location).schema
    except Exception:  # no table Delta can read there (a missing or empty log)
        return False
    return schema is not None


def merge(source: DataFrame, location: str, on: str, *, update_when: str | None = None
          ) -> dict[str, int]:
    """``MERGE INTO`` the Delta table at ``location`` (``t``) the rows of ``source`` (``s``): a
    match on ``on`` updates every column (when ``update_when`` holds, if given), a row without
    one is inserted. Returns MERGE's figures (see :func:`merge_clauses`)."""
    matched = f"WHEN MATCHED AND ({update_when}) THEN UPDATE SET *" if update_when \
        else "WHEN MATCHED THEN UPDATE SET *"
    return merge_clauses(source, location, on, [matched, "WHEN NOT MATCHED THEN INSERT *"])


def merge_clauses(source: DataFrame, location: str, on: str, clauses: Sequence[str]
                  ) -> dict[str, int]:
    """``MERGE INTO`` the Delta table at ``location`` (aliased ``t``) ``USING`` ``source``
    (aliased ``s``) ``ON`` ``on`` with ``clauses`` (``WHEN MATCHED ...``), in ``source``'s own
    session (a micro-batch's, in foreachBatch); returns MERGE's figures
    (``num_inserted_rows``, ``num_updated_rows``...). Spark SQL, so Spark Connect runs it too."""
    statement = (f"MERGE INTO {quote_path(location)} AS t USING <source> AS s ON {on} "
                 + " ".join(clauses))
    # The text is a template whose {source} Spark fills with the DataFrame: braces of the
    # location or the conditions are escaped.
    template = statement.replace("{", "{{").replace("}", "}}").replace("<source>", "{source}")
    result = source.sparkSession.sql(template, source=source).collect()
    return {k: int(v) for k, v in result[0].asDict().items() if v is not None} \
        if result else {}


def change_feed_enabled(spark: SparkSession, location: str) -> bool:
    """Whether the Delta table at ``location`` records its change data feed."""
    return table_properties(spark, location).get(CHANGE_FEED, "").lower() == "true"


def table_properties(spark: SparkSession, table: str) -> dict[str, str]:
    """The properties of a Delta table (``SHOW TBLPROPERTIES`` reads the log's metadata only)."""
    rows = spark.sql(f"SHOW TBLPROPERTIES {_sql_table(table)}").collect()
    return {r["key"]: r["value"] for r in rows}


def set_properties(spark: SparkSession, table: str, properties: Mapping[str, str]) -> None:
    """Set ``properties`` on a Delta table, in one commit."""
    spark.sql(f"ALTER TABLE {_sql_table(table)} SET TBLPROPERTIES ({_assignments(properties)})")


def unset_properties(spark: SparkSession, table: str, names: Sequence[str]) -> None:
    """Remove the properties ``names`` from a Delta table (those it has), in one commit."""
    listed = ", ".join(sql_string(n) for n in names)
    spark.sql(f"ALTER TABLE {_sql_table(table)} UNSET TBLPROPERTIES IF EXISTS ({listed})")


def _assignments(properties: Mapping[str, str]) -> str:
    return ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in properties.items())


def read_table(spark: SparkSession, location: str, *, version: int | None = None) -> DataFrame:
    """The Delta table at ``location``; with ``version``, as that commit left it."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(location)


def change_feed(spark: SparkSession, location: str, start: int, end: int) -> DataFrame:
    """The rows the commits ``start`` to ``end`` (both included) of the Delta table at
    ``location`` inserted, updated and deleted, from its change data feed (``_change_type``,
    ``_commit_version``...). Fails (``AnalysisException``) when a commit in the range recorded
    none, or changed the schema."""
    return (spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", start).option("endingVersion", end).load(location))


def version_rows(spark: SparkSession, location: str, version: int) -> DataFrame:
    """The rows one commit added to a table whose change data feed is on: read from that
    commit's own files, without listing the rest of the table."""
    return change_feed(spark, location, version, version) \
        .where(F.col("_change_type") == "insert")


@dataclass(frozen=True)
class Commit:
    """A commit of a Delta table, as its history gives it."""

    version: int
    timestamp: datetime  # naive, the local time (as PySpark gives a TIMESTAMP)


def history(spark: SparkSession, table: str, limit: int | None = None) -> DataFrame:
    """The table's history (``DESCRIBE HISTORY``), newest commit first (``limit``: so many)."""
    text = f"DESCRIBE HISTORY {_sql_table(table)}"
    return spark.sql(text if limit is None else f"{text} LIMIT {int(limit)}")


def latest_commit(spark: SparkSession, table: str) -> Commit | None:
    """The newest commit of a Delta table, at its current version (None: no history)."""
    row = history(spark, table, 1).select("version", "timestamp").first()
    return Commit(int(row["version"]), row["timestamp"]) if row is not None else None


def _sql_table(table: str) -> str:
    """A table in SQL: a location (it holds a ``/``) as ``delta.`<location>```, a catalog name
    (validated identifiers, never a ``/``) quoted part by part."""
    return quote_path(table) if "/" in table else quote_name(table)
