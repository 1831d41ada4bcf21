"""Evidence of partition pruning for a query: what the plan holds and what the scans read.

``explain_pruning(spark, query)`` runs the query (a DataFrame or SQL text) without bringing its
rows to the driver, walks the executed physical plan (through adaptive query stages) to each
file scan, and reports whether the plan holds a dynamic pruning expression
(``dynamicpruningexpression``), overall and per scan, and per scan the partitions and files it
read (its SQL metrics ``numPartitions`` and ``numFiles``) against the table's totals (its file
index, listed without filters).

    >>> evidence = explain_pruning(spark, "SELECT ... FROM gold.sales f JOIN silver.stores d "
    ...                                   "ON f.store_id = d.store_id WHERE d.region = 'north'")
    >>> evidence.scan("sales").partitions_read, evidence.scan("sales").partitions_total
    (10, 100)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from framework.delta import detail
from framework.errors import ScanNotFoundError
from framework.jvm import executed_scans, is_connect
from framework.text import render_table


@dataclass(frozen=True)
class ScanEvidence:
    """What one file scan of the executed plan read, against its table's totals."""

    table: str
    dynamic_pruning: bool
    partitions_read: int | None  # None: the table is not partitioned
    partitions_total: int | None
    files_read: int
    files_total: int


@dataclass(frozen=True)
class PruningEvidence:
    """The evidence for one query."""

    dynamic_pruning: bool
    scans: tuple[ScanEvidence, ...]
    plan: str

    def scan(self, table: str) -> ScanEvidence:
        """The scan of ``table`` (a name or path, matched at its end: ``sales`` finds
        ``spark_catalog.gold.sales``); the one that read the most files if it was scanned twice."""
        hits = [s for s in self.scans if _matches(s.table, table)]
        if not hits:
            found = ", ".join(s.table for s in self.scans) or "none"
            raise ScanNotFoundError(f"expected a scan of {table} in the plan, found scans "
                                       f"of: {found}")
        return max(hits, key=lambda s: s.files_read)

    def to_dict(self) -> dict[str, Any]:
        return {"dynamic_pruning": self.dynamic_pruning,
                "scans": [asdict(s) for s in self.scans]}

    def render(self) -> str:
        head = ("table", "dynamic pruning", "partitions read", "files read")
        rows = [(s.table, "yes" if s.dynamic_pruning else "no",
                 "-" if s.partitions_total is None
                 else f"{s.partitions_read} of {s.partitions_total}",
                 f"{s.files_read} of {s.files_total}") for s in self.scans]
        title = ("dynamic partition pruning: " +
                 ("in the plan" if self.dynamic_pruning else "not in the plan"))
        return title + "\n" + render_table(head, rows, sep="  ")


def explain_pruning(spark: SparkSession, query: DataFrame | str,
                    run: bool = True) -> PruningEvidence:
    """Run ``query`` and return the evidence of what its scans pruned. ``run=False`` reads the
    evidence of a DataFrame already run by an action (its plan keeps the scans' metrics)."""
    df = spark.sql(query) if isinstance(query, str) else query
    if is_connect(df):
        return _connect_evidence(spark, df, run)
    text, found = executed_scans(df, run)
    scans = tuple(ScanEvidence(s.table, "dynamicpruning" in s.partition_filters.lower(),
                               s.partitions_read, s.partitions_total, s.files_read or 0,
                               s.files_total) for s in found)
    return PruningEvidence("dynamicpruningexpression" in text.lower(), scans, text)


def _connect_evidence(spark: SparkSession, df: DataFrame, run: bool) -> PruningEvidence:
    """The evidence on a Spark Connect session: the scans' metrics from the executed plan
    (``DataFrame.executionInfo``, filled by ``run`` collecting the rows to the client: the one
    action whose info keeps them), the pruning filters from the plan's text, the totals from
    each Delta table's own figures (``DESCRIBE DETAIL``, and its distinct partition values)."""
    connect: Any = df  # a Spark Connect DataFrame: executionInfo, _explain_string
    if run or connect.executionInfo is None:
        # (a write to Spark's noop sink keeps the rows on the server, but its execution info
        # holds the write command's metrics, not the scans')
        connect.collect()
    info = connect.executionInfo
    text = str(connect._explain_string(mode="formatted"))
    blocks = _formatted_scans(text)
    scans = []
    for node in (info.metrics._metrics if info and info.metrics else []):
        if not node.name.startswith(_SCAN):
            continue
        table = node.name[len(_SCAN):].strip()  # "" for a scan of files by path
        metrics = {m.name: m.value for m in node.metrics}
        partitions, files = _table_totals(spark, table)
        scans.append(ScanEvidence(
            table=table,
            dynamic_pruning="dynamicpruning" in blocks.get(table, "").lower(),
            partitions_read=int(_first(metrics, "numPartitions", "number of partitions read"))
            if partitions is not None else None,
            partitions_total=partitions,
            files_read=int(_first(metrics, "numFiles", "number of files read")),
            files_total=files if files is not None else 0))
    return PruningEvidence("dynamicpruningexpression" in text.lower(), tuple(scans), text)


_SCAN = "Scan parquet"


def _first(metrics: dict[str, Any], *names: str) -> Any:
    """A metric by its key or its display name (the server may send either)."""
    return next((metrics[n] for n in names if n in metrics), 0)


def _formatted_scans(text: str) -> dict[str, str]:
    """The blocks of a formatted plan's scans (``(3) Scan parquet <table>`` and its lines),
    by table."""
    found: dict[str, str] = {}
    for block in text.split("\n\n"):
        head, _, rest = block.strip().partition("\n")
        name = head.partition(") ")[2]
        if name.startswith(_SCAN):
            table = name[len(_SCAN):].strip()
            found[table] = found.get(table, "") + rest
    return found


def _table_totals(spark: SparkSession, table: str) -> tuple[int | None, int | None]:
    """A Delta table's partitions (None: not partitioned) and files, from its own figures."""
    from pyspark.errors import AnalysisException

    from framework.identifiers import quote_all, quote_name

    if not table:
        return None, None
    try:
        found = detail(spark, table)
    except AnalysisException:  # not a Delta table: its totals are not known
        return None, None
    columns = list(found["partitionColumns"] or [])
    partitions = None
    if columns:
        names = quote_all(columns)
        partitions = int(spark.sql(f"SELECT count(*) FROM (SELECT DISTINCT {names} FROM "
                                   f"{quote_name(table)})").collect()[0][0])
    return partitions, int(found["numFiles"])


def _matches(name: str, wanted: str) -> bool:
    name, wanted = name.rstrip("/"), wanted.rstrip("/")
    return name == wanted or name.endswith("." + wanted) or name.endswith("/" + wanted)
