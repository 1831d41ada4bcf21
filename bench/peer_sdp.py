"""The demo's orders flow as a Spark Declarative Pipeline (``spark-pipelines``, shipped with
pyspark), beside the framework on copies of the same feed, side by side in one run; the
pipeline twice: as a user would first write it (doing less than the framework), and doing the
same work (a bronze table first).

    python bench/peer_sdp.py [--orders 100000] [--files 50] [--rounds 3]

The retail feed (examples/retail/demo.py: malformed lines, a gzip file cut short, duplicate
and re-delivered orders, a late delivery held back) is generated once; each round copies it
into a fresh root per side, and the order of the sides alternates (framework, SDP, SDP equal
work in odd rounds, the reverse in even ones). Every side runs the same tables, twice, as
``medallion demo`` does: once on the landed feed, then again after the later delivery lands
(the offline till's late file and a new store's row, ``examples.retail.demo.deliver_later``):

* **framework**: ``medallion run all`` with bronze.orders, silver.orders, gold.store_sales,
  bronze.stores and silver.stores (the repository's conf/, the local default), then the same
  tables again (silver.orders releases the orders it held for the new store). Timed by each
  run's own ``duration_s`` (its summary): the runs from the first table's start to the last
  one's end, without Spark's start.
* **SDP**: a pipeline written into the round's root at run time (``spark-pipeline.yml``, one
  Python file, a ``spark-defaults.conf`` in ``SPARK_CONF_DIR`` with Delta's extension, catalog
  and jars as framework/session.py resolves them, a Derby metastore under the root, and
  ``spark.sql.files.ignoreCorruptFiles``): a streaming table ``orders`` reading the landing JSON
  itself (typed, filtered and deduplicated within a 2-day watermark as silver.orders is), a
  materialized view ``store_sales`` (orders, items and revenue per store and day, as
  gold.store_sales) and a materialized view ``stores``; then ``spark-pipelines run --refresh
  orders,store_sales,stores`` after the later delivery lands. Timed from the CLI's ``Creating
  dataflow graph...`` line (the session is up) to its ``Run is COMPLETED.`` line, each line
  timed as it arrives on the pipe.
* **SDP, equal work**: the same tables with a bronze table first, as the framework keeps it: a
  streaming table ``bronze_orders`` reading the landing files as text (10 files a batch), each
  line parsed against the feed's schema, the keys outside it rescued as JSON in
  ``_rescued_data``, a malformed line kept whole in ``_corrupt_record``, and the ingestion
  columns ``_source_file``, ``_file_modification_time``, ``_file_size``, ``_ingested_at``;
  ``orders`` reads ``bronze_orders`` as a stream (its well-formed rows, typed, filtered and
  deduplicated on ``order_id`` within the 2-day watermark), ``store_sales`` and ``stores`` as in
  SDP. These are two pipelines, run one after the other (bronze, then the rest; on the late
  delivery ``--refresh orders,store_sales,stores`` for the second): in one pipeline, a watermark
  or a deduplication on a stream of a pipeline table fails as the flow is registered (Spark
  Connect's planner analyses the input of ``withWatermark`` and of
  ``dropDuplicatesWithinWatermark`` at once, before the pipeline has made the table:
  ``[TABLE_OR_VIEW_NOT_FOUND] The table or view `bronze_orders` cannot be found``; the table's
  Delta folder read as a stream fails the same way, ``[DELTA_SCHEMA_NOT_SET]``, and would hide
  the dependency from the pipeline); SQL's ``WATERMARK`` clause registers, but its only
  deduplication, ``SELECT DISTINCT``, is a streaming aggregation that writes an order once the
  watermark has passed it, holding back the last two days. Timed as SDP, over the four
  processes.

The wall clock of every process is printed next to it. After the rounds one Spark session
reads every side's Delta tables by path and compares them with the framework's: rows per
table, orders, items and revenue per store and day, and the order ids each side kept; then it
checks, from the runs' outputs, what the pipelines did with what the framework quarantines,
archives and counts.

The last line is one JSON object with the times, ``"ratio"`` = median SDP seconds / median
framework seconds and ``"ratio_equal_work"`` = median SDP equal-work seconds / median
framework seconds. If a pipeline cannot run here, the exact error is printed and the JSON line
says so (``sdp_error``, ``sdp_equal_work_error``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.retail.demo import MANIFEST, Feed, deliver_later, generate
from framework.config.loader import load_project
from framework.config.model import ProjectConfig
from framework.session import (
    DELTA_CATALOG,
    DELTA_EXTENSION,
    cached_jars,
    quiet_log_config,
    spark_packages,
)
from tests.support import REPO, medallion_cmd

SPARK_PIPELINES = Path(sys.executable).parent / "spark-pipelines"
FIRST_TABLES = ("bronze.orders", "silver.orders", "gold.store_sales", "bronze.stores",
                "silver.stores")
LATER_TABLES = FIRST_TABLES  # what the later delivery feeds, as `medallion demo` runs them
ORDERS_SCHEMA = ("order_id STRING, customer_id STRING, store_id STRING, event_time TIMESTAMP, "
                 "quantity INT, unit_price DECIMAL(10,2), status STRING")
STORES_SCHEMA = "store_id STRING, name STRING, region STRING, opened_on DATE"
GRAPH_LINE, RUN_LINE, DONE_LINE = ("Creating dataflow graph...", "Starting run...",
                                   "Run is COMPLETED.")
SIDES = ("framework", "sdp", "sdp_equal_work")
LABELS = {"framework": "framework", "sdp": "SDP", "sdp_equal_work": "SDP, equal work"}

# The pipelines' Python files: a head, then tables (str.format fills in the paths and schemas).
HEAD = '''\
"""{doc}"""
from pyspark import pipelines as dp
from pyspark.sql import Window
from pyspark.sql import functions as F

LANDING = {landing!r}
ORDERS = {orders!r}
STORES = {stores!r}
'''

ORDERS_FROM_LANDING = '''

@dp.table(name="orders", partition_cols=["order_date"])
def orders():
    raw = spark.readStream.schema(ORDERS).option("maxFilesPerTrigger", 10) \\
        .json(LANDING + "/orders")
    checked = raw.where("order_id IS NOT NULL AND event_time IS NOT NULL AND quantity > 0")
    typed = checked.select(
        "order_id", "customer_id", "store_id", "event_time", "quantity", "unit_price",
        (F.col("quantity") * F.col("unit_price")).cast("decimal(12,2)").alias("amount"),
        "status", F.to_date("event_time").alias("order_date"))
    return typed.withWatermark("event_time", "2 days") \\
        .dropDuplicatesWithinWatermark(["order_id"])
'''

BRONZE_ORDERS = '''
FIELDS = [field.split()[0] for field in ORDERS.split(", ")]


@dp.table(name="bronze_orders")
def bronze_orders():
    """Every line of the landing files: its fields, the keys outside the schema rescued, a
    malformed line kept whole, and the ingestion columns."""
    lines = spark.readStream.option("maxFilesPerTrigger", 10).text(LANDING + "/orders")
    record = F.from_json("value", ORDERS + ", _corrupt_record STRING",
                         dict(columnNameOfCorruptRecord="_corrupt_record"))
    keys = F.try_variant_get(F.try_parse_json("value"), "$", "map<string,variant>")
    known = F.array(*[F.lit(name) for name in FIELDS])
    extra = F.map_filter(keys, lambda k, v: ~F.array_contains(known, k))
    parsed = lines.select(record.alias("r"), extra.alias("extra"), "_metadata")
    return parsed.select(
        *[F.col("r")[name].alias(name) for name in FIELDS],
        F.when(F.cardinality("extra") > 0, F.to_json("extra")).alias("_rescued_data"),
        F.col("r._corrupt_record").alias("_corrupt_record"),
        F.col("_metadata.file_path").alias("_source_file"),
        F.col("_metadata.file_modification_time").alias("_file_modification_time"),
        F.col("_metadata.file_size").alias("_file_size"),
        F.current_timestamp().alias("_ingested_at"))
'''

ORDERS_FROM_BRONZE = '''

@dp.table(name="orders", partition_cols=["order_date"])
def orders():
    # bronze_orders is the bronze pipeline's table, in the catalog before this one registers
    bronze = spark.readStream.table("bronze_orders")
    checked = bronze.where("_corrupt_record IS NULL AND order_id IS NOT NULL "
                           "AND event_time IS NOT NULL AND quantity > 0")
    typed = checked.select(
        "order_id", "customer_id", "store_id", "event_time", "quantity", "unit_price",
        (F.col("quantity") * F.col("unit_price")).cast("decimal(12,2)").alias("amount"),
        "status", F.to_date("event_time").alias("order_date"))
    return typed.withWatermark("event_time", "2 days") \\
        .dropDuplicatesWithinWatermark(["order_id"])
'''

MARTS = '''

@dp.materialized_view(name="store_sales", partition_cols=["store_id"])
def store_sales():
    daily = spark.read.table("orders").groupBy(F.window("event_time", "1 day"), "store_id")
    return daily.agg(F.count(F.lit(1)).alias("orders"), F.sum("quantity").alias("items"),
                     F.sum("amount").alias("revenue")) \\
        .select(F.col("window.start").alias("window_start"),
                F.col("window.end").alias("window_end"),
                F.to_date("window.start").alias("window_date"),
                "store_id", "orders", "items", "revenue")


@dp.materialized_view(name="stores")
def stores():
    latest = Window.partitionBy("store_id").orderBy(F.col("opened_on").desc())
    return spark.read.schema(STORES).json(LANDING + "/stores") \\
        .withColumn("n", F.row_number().over(latest)).where("n = 1").drop("n")
'''

PIPELINE = HEAD + ORDERS_FROM_LANDING + MARTS
BRONZE_PIPELINE = HEAD + BRONZE_ORDERS
EQUAL_WORK_PIPELINE = HEAD + ORDERS_FROM_BRONZE + MARTS


def project_at(root: Path) -> ProjectConfig:
    """The repository's conf/ with its lakehouse root at ``root``."""
    os.environ["MEDALLION_ROOT"] = str(root)
    return load_project(REPO / "conf", "local")


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("MEDALLION_", "SPARK_"))}


# ---------------------------------------------------------------------- the framework
def framework_run(root: Path, tables: tuple[str, ...], name: str
                  ) -> tuple[float, float, dict[str, Any]]:
    """One ``medallion run all`` of ``tables`` on ``root``: its ``duration_s``, the process's
    wall seconds, and its summary."""
    summary = root / f".{name}.json"
    environment = clean_env()
    environment.update(MEDALLION_ROOT=str(root), MEDALLION_CONF=str(REPO / "conf"))
    selection = [a for t in tables for a in ("--table", f"spark_catalog.{t}")]
    started = time.perf_counter()
    done = subprocess.run([*medallion_cmd(), "run", "all", *selection, "--summary",
                           str(summary), "--log-format", "json", "--log-level", "warning"],
                          capture_output=True, text=True, env=environment, timeout=3600)
    wall = time.perf_counter() - started
    if done.returncode != 0 or not summary.is_file():
        sys.exit(f"medallion run all ({name}) failed (exit {done.returncode}):\n"
                 f"{done.stdout[-3000:]}\n{done.stderr[-4000:]}")
    result = json.loads(summary.read_text())
    return float(result["duration_s"]), wall, result


def framework_side(root: Path) -> tuple[float, float, list[dict[str, Any]]]:
    first = framework_run(root, FIRST_TABLES, "first")
    deliver_later(project_at(root))
    second = framework_run(root, LATER_TABLES, "later")
    return first[0] + second[0], first[1] + second[1], [first[2], second[2]]


# ---------------------------------------------------------------------- the pipelines
def write_pipeline(root: Path, code: str = PIPELINE, folder_name: str = "pipeline",
                   name: str = "retail",
                   doc: str = "The retail demo's orders, daily store sales and stores, "
                              "declared for spark-pipelines.") -> Path:
    """A pipeline's spec, code and Spark settings under ``root``/``folder_name``, its storage
    beside it; returns the folder. The pipelines of one root share its catalog."""
    folder = root / folder_name
    (folder / "transformations").mkdir(parents=True)
    (folder / "conf").mkdir()
    (folder / "spark-pipeline.yml").write_text(
        f"name: {name}\nstorage: file://{root / f'{folder_name}-storage'}\n"
        "libraries:\n  - glob:\n      include: transformations/**\n", encoding="utf-8")
    (folder / "transformations" / "retail.py").write_text(
        code.format(doc=doc, landing=str(root / "landing"), orders=ORDERS_SCHEMA,
                    stores=STORES_SCHEMA), encoding="utf-8")
    jars = cached_jars()
    settings = {
        # Delta and a persistent catalog are static settings: the server reads them at start
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.sql.sources.default": "delta",
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(root / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL":
            f"jdbc:derby:;databaseName={root / 'metastore_db'};create=true",
        "spark.driver.extraJavaOptions":
            f"-Dderby.system.home={root} -Dlog4j2.configurationFile={quiet_log_config()}",
        "spark.driver.memory": "4g",  # as conf/environments/local.yaml
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
        "spark.ui.showConsoleProgress": "false",
        # the cut gzip file fails the read otherwise
        "spark.sql.files.ignoreCorruptFiles": "true",
    }
    if jars:
        settings["spark.jars"] = ",".join(jars)
    else:
        settings["spark.jars.packages"] = ",".join(spark_packages())
    (folder / "conf" / "spark-defaults.conf").write_text(
        "".join(f"{k} {v}\n" for k, v in settings.items()), encoding="utf-8")
    return folder


class PipelineFailed(Exception):
    """``spark-pipelines run`` ended without completing its run."""


@dataclass
class PipelineRuns:
    """One or more ``spark-pipelines run``, added up: seconds from the graph's creation to the
    completed run, of them the seconds to the run's start (the graph created and its
    definitions registered), the processes' wall seconds, the seconds before the graph
    (Spark's start), and each process's lines."""

    seconds: float
    setup: float
    wall: float
    start: float
    lines: list[list[str]]

    def __add__(self, other: PipelineRuns) -> PipelineRuns:
        return PipelineRuns(self.seconds + other.seconds, self.setup + other.setup,
                            self.wall + other.wall, self.start + other.start,
                            self.lines + other.lines)


def pipeline_run(folder: Path, *extra: str) -> PipelineRuns:
    """One ``spark-pipelines run`` of the pipeline in ``folder``, timed."""
    environment = clean_env()
    environment.update(SPARK_CONF_DIR=str(folder / "conf"), PYSPARK_PYTHON=sys.executable,
                       PYTHONUNBUFFERED="1")
    started = time.perf_counter()
    marks: dict[str, float] = {}
    lines: list[str] = []
    with subprocess.Popen([str(SPARK_PIPELINES), "run", "--spec",
                           str(folder / "spark-pipeline.yml"), *extra], cwd=folder,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=environment) as process:
        assert process.stdout is not None
        for line in process.stdout:
            now = time.perf_counter()
            lines.append(line.rstrip("\n"))
            for mark in (GRAPH_LINE, RUN_LINE, DONE_LINE):
                if line.rstrip().endswith(mark):
                    marks.setdefault(mark, now)
        code = process.wait(timeout=3600)
    wall = time.perf_counter() - started
    if code != 0 or DONE_LINE not in marks or GRAPH_LINE not in marks:
        raise PipelineFailed(pipeline_error(lines, code))
    graph = marks[GRAPH_LINE]
    return PipelineRuns(marks[DONE_LINE] - graph, marks.get(RUN_LINE, graph) - graph, wall,
                        graph - started, [lines])


def pipeline_error(lines: list[str], code: int) -> str:
    """The error lines of a failed run: the Python exception, else Java's, else the tail."""
    python = [i for i, line in enumerate(lines)
              if re.match(r"^[\w.]+(Exception|Error)\b", line)]
    java = [line for line in lines if re.match(r"^(Exception in thread|\S+Exception:)", line)]
    if python:
        return f"exit {code}: " + "\n".join(lines[python[-1]:python[-1] + 8])
    if java:
        return f"exit {code}: " + java[-1]
    return f"exit {code}, no completed run; the output ends with:\n" + "\n".join(lines[-15:])


def sdp_side(root: Path) -> PipelineRuns:
    folder = write_pipeline(root)
    first = pipeline_run(folder)
    deliver_later(project_at(root))
    return first + pipeline_run(folder, "--refresh", "orders,store_sales,stores")


def sdp_equal_work_side(root: Path) -> PipelineRuns:
    """The bronze pipeline, then the pipeline reading its table, on the feed and again after
    the late file."""
    bronze = write_pipeline(root, BRONZE_PIPELINE, "bronze-pipeline", "retail_bronze",
                            "The retail demo's orders as landed, with ingestion columns.")
    rest = write_pipeline(root, EQUAL_WORK_PIPELINE, doc="The retail demo's orders read from "
                          "bronze_orders, daily store sales and stores.")
    runs = pipeline_run(bronze) + pipeline_run(rest)
    deliver_later(project_at(root))
    return runs + pipeline_run(bronze) + pipeline_run(rest, "--refresh",
                                                     "orders,store_sales,stores")


# ---------------------------------------------------------------------- the comparison
def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "_manifests" not in p.parts
                  and not p.name.startswith(".")) if folder.is_dir() else []


def agreement(spark: Any, fw_path: dict[str, str], side: dict[str, str], label: str
              ) -> dict[str, Any]:
    """A pipeline's ``store_sales`` and ``orders`` against gold.store_sales and
    silver.orders: store-days that differ in orders, items or revenue, and the order ids
    one side kept only; printed, and returned as figures."""
    from pyspark.sql import functions as F

    def table(path: str) -> Any:
        return spark.read.format("delta").load(path)

    keys, figures = ["store_id", "window_date"], ["orders", "items", "revenue"]
    mine = table(fw_path["gold.store_sales"]).select(*keys, *[F.col(c).alias(f"fw_{c}")
                                                              for c in figures])
    theirs = table(side["store_sales"]).select(*keys, *[F.col(c).alias(f"sdp_{c}")
                                                        for c in figures])
    joined = mine.join(theirs, keys, "full_outer")
    differ = joined.where(" OR ".join(f"NOT (fw_{c} <=> sdp_{c})" for c in figures))
    differing = differ.orderBy(*keys).collect()
    totals = joined.agg(*[F.sum(f"{s}_{c}").alias(f"{s}_{c}")
                          for s in ("fw", "sdp") for c in figures]).first()
    print(f"{label}: store_sales has {joined.count()} store-days; orders, items and revenue "
          f"differ from gold.store_sales in {len(differing)}; revenue in all: framework "
          f"{totals['fw_revenue']}, the pipeline {totals['sdp_revenue']}")
    for r in differing[:5]:
        print(f"  {r['store_id']} {r['window_date']}: framework "
              f"{r['fw_orders']}/{r['fw_items']}/{r['fw_revenue']}, the pipeline "
              f"{r['sdp_orders']}/{r['sdp_items']}/{r['sdp_revenue']}")
    fw_ids = table(fw_path["silver.orders"]).select("order_id")
    sdp_ids = table(side["orders"]).select("order_id")
    only_fw, only_sdp = fw_ids.subtract(sdp_ids).count(), sdp_ids.subtract(fw_ids).count()
    print(f"{label}: order ids, {only_fw} only in the framework's silver.orders, {only_sdp} "
          "only in the pipeline's orders")
    return {"store_days_differing": len(differing),
            "revenue": {"framework": str(totals["fw_revenue"]),
                        "sdp": str(totals["sdp_revenue"])},
            "order_ids_only_framework": only_fw, "order_ids_only_sdp": only_sdp}


def compare(work: Path, fw: Path, sdp: Path | None, equal: Path | None, feed: Feed,
            fw_runs: list[dict[str, Any]], sdp_lines: list[list[str]],
            equal_lines: list[list[str]]) -> dict[str, Any]:
    """Every side's tables read by path in one session, and what the pipelines did with what
    the framework quarantined, archived and counted; printed, and returned as figures."""
    from pyspark.sql import functions as F

    from framework.session import get_spark

    spark = get_spark(project_at(work / "compare").env, "peer_sdp compare")
    fw_path = {t: str(fw / "tables" / t.replace(".", "/")) for t in (
        "bronze.orders", "bronze.orders_quarantine", "silver.orders",
        "silver.orders_quarantine", "gold.store_sales", "silver.stores")}
    sides = {"sdp": (sdp, ("orders", "store_sales", "stores")),
             "sdp_equal_work": (equal, ("bronze_orders", "orders", "store_sales", "stores"))}
    paths = {side: {t: str(root / "warehouse" / t) for t in tables}
             for side, (root, tables) in sides.items() if root is not None}

    def table(path: str) -> Any:
        return spark.read.format("delta").load(path)

    rows = {f"framework {t}": table(p).count() for t, p in fw_path.items()}
    for side, side_paths in paths.items():
        rows.update({f"{side} {t}": table(p).count() for t, p in side_paths.items()})
    print("rows per table (last round):")
    for name, count in rows.items():
        print(f"  {name:40s} {count:>9,}")
    agreed = {side: agreement(spark, fw_path, side_paths, LABELS[side])
              for side, side_paths in paths.items()}

    # what the framework handles, from its runs' summaries
    bronze, silver = (next(t for t in fw_runs[0]["tables"] if t["table"] ==
                           f"spark_catalog.{name}")["counts"] for name in FIRST_TABLES[:2])
    later_silver = next(t for t in fw_runs[1]["tables"]
                        if t["table"] == "spark_catalog.silver.orders")["counts"]
    fw_ids = table(fw_path["silver.orders"]).select("order_id")
    result: dict[str, Any] = {"rows": rows}
    if sdp is not None:
        result["sdp"] = {**agreed["sdp"], "checks": sdp_checks(
            spark, sdp, feed, rows, bronze, silver, later_silver, fw, fw_ids, sdp_lines,
            table(paths["sdp"]["orders"]))}
    if equal is not None:
        bronze_rows = table(paths["sdp_equal_work"]["bronze_orders"])
        kept = table(paths["sdp_equal_work"]["orders"]).select("order_id")
        equal_text = "\n".join(line for run in equal_lines for line in run)
        result["sdp_equal_work"] = {**agreed["sdp_equal_work"], "checks": {
            "bronze_rows": rows["sdp_equal_work bronze_orders"],
            "framework_bronze_and_quarantine_rows": rows["framework bronze.orders"]
            + rows["framework bronze.orders_quarantine"],
            "malformed_rows_kept": bronze_rows.where("_corrupt_record IS NOT NULL").count(),
            "framework_quarantined_rows": rows["framework bronze.orders_quarantine"],
            "rescued_rows": bronze_rows.where(F.col("_rescued_data").isNotNull()).count(),
            "framework_rescued_rows": bronze.get("rescued_rows", 0),
            "files_in_bronze": bronze_rows.select("_source_file").distinct().count(),
            "unreadable_file_named": feed.unreadable_file in equal_text,
            "late_rows_kept": spark.read.schema(ORDERS_SCHEMA).json(
                str(equal / "landing" / "orders" / feed.later_files[0]))
            .join(kept, "order_id").count(),
            "left_in_landing": len(files_under(equal / "landing" / "orders")),
            "columns": bronze_rows.columns}}
    return result


def sdp_checks(spark: Any, sdp: Path, feed: Feed, rows: dict[str, int],
               bronze: dict[str, Any], silver: dict[str, Any], later_silver: dict[str, Any],
               fw: Path, fw_ids: Any, sdp_lines: list[list[str]], sdp_orders: Any
               ) -> dict[str, Any]:
    """What the SDP side did with what the framework quarantined, archived and counted."""
    orders_landing = sdp / "landing" / "orders"
    corrupt = spark.read.schema(ORDERS_SCHEMA + ", _corrupt_record STRING") \
        .option("ignoreCorruptFiles", "true").json(str(orders_landing)).cache()
    malformed = corrupt.where("_corrupt_record IS NOT NULL").count()
    corrupt.unpersist()
    try:
        spark.read.schema(ORDERS_SCHEMA).json(str(orders_landing / feed.unreadable_file)) \
            .count()
        unreadable_error = "none (the file read)"
    except Exception as exc:  # the error the pipeline meets without ignoreCorruptFiles
        text = " ".join(str(exc).split())
        found = re.search(r"\[[A-Z_.]+\].*?(?= at |$)", text)
        unreadable_error = (found.group(0) if found else text)[:240]
    sdp_text = "\n".join(line for run in sdp_lines for line in run)
    sdp_ids = sdp_orders.select("order_id")
    late_ids = spark.read.schema(ORDERS_SCHEMA).json(
        str(orders_landing / feed.later_files[0])).select("order_id")
    late_in_sdp = late_ids.join(sdp_ids, "order_id").count()
    late_in_fw = late_ids.join(fw_ids, "order_id").count()
    fw_quarantined_files = files_under(fw / "_quarantine" / "files")
    return {
        "malformed_lines": {
            "feed": feed.malformed_lines,
            "framework_quarantined_rows": rows["framework bronze.orders_quarantine"],
            "sdp_lines_read_as_null_rows": malformed,
            "sdp_kept_anywhere": 0},
        "unreadable_file": {
            "file": feed.unreadable_file,
            "framework_files_quarantined": bronze.get("files_quarantined", 0),
            "framework_quarantine_folder": [p.name for p in fw_quarantined_files
                                            if p.name == feed.unreadable_file],
            "sdp_output_mentions_it": feed.unreadable_file in sdp_text,
            "sdp_without_ignoreCorruptFiles": unreadable_error},
        "archiving": {
            "framework_files_archived": len(files_under(fw / "archive" / "orders")),
            "framework_left_in_landing": len(files_under(fw / "landing" / "orders")),
            "sdp_left_in_landing": len(files_under(orders_landing))},
        "late_rows": {
            "feed": feed.late_events,
            "framework_late_rows_dropped": later_silver.get("late_rows_dropped", 0),
            "framework_kept": late_in_fw,
            "sdp_kept": late_in_sdp,
            "sdp_output_counts_them": bool(re.search(r"late|watermark", sdp_text, re.I))},
        "rejected_rows": {
            "feed_quantity_0": feed.rejected_events,
            "framework_quarantined_rows": rows["framework silver.orders_quarantine"],
            "sdp_output_counts_them": bool(re.search(r"filter|quantity", sdp_text, re.I))},
        "duplicates": {
            "framework_duplicates_dropped": silver.get("duplicates_dropped", 0)
            + later_silver.get("duplicates_dropped", 0),
            "sdp_output_counts_them": bool(re.search(r"duplicat", sdp_text, re.I))},
        "extra_keys": {
            "framework_rescued_rows": bronze.get("rescued_rows", 0),
            "sdp_columns": sdp_orders.columns},
    }


def print_checks(checks: dict[str, Any]) -> None:
    c = checks
    m, u, a, late = (c["malformed_lines"], c["unreadable_file"], c["archiving"],
                     c["late_rows"])
    print("what the pipeline did not do that the framework did, from the runs' outputs:")
    print(f"  malformed lines ({m['feed']} in the feed): the framework quarantined "
          f"{m['framework_quarantined_rows']} rows, with their raw lines; the pipeline's JSON "
          f"reader read {m['sdp_lines_read_as_null_rows']} lines as rows of nulls, which its "
          "filter dropped: no table, count or event of the pipeline holds them")
    print(f"  the cut file {u['file']}: the framework moved it to its quarantine folder "
          f"({u['framework_files_quarantined']} file, {len(u['framework_quarantine_folder'])} "
          "found there); the pipeline skipped it with ignoreCorruptFiles, its output "
          f"{'names' if u['sdp_output_mentions_it'] else 'does not name'} it; without that "
          f"setting the read fails: {u['sdp_without_ignoreCorruptFiles']}")
    print(f"  archiving: the framework archived {a['framework_files_archived']} order files "
          f"and left {a['framework_left_in_landing']} in landing; the pipeline left "
          f"{a['sdp_left_in_landing']} in landing")
    print(f"  late rows ({late['feed']} in the late file): the framework counted "
          f"{late['framework_late_rows_dropped']} dropped as late and kept "
          f"{late['framework_kept']}; the pipeline kept {late['sdp_kept']} and its output "
          f"{'mentions' if late['sdp_output_counts_them'] else 'has no word of'} late rows")
    r, d = c["rejected_rows"], c["duplicates"]
    print(f"  orders of quantity 0 ({r['feed_quantity_0']}): the framework quarantined "
          f"{r['framework_quarantined_rows']} with the rule they broke; the pipeline filtered "
          "them out, uncounted (no expectations in open-source SDP)")
    print(f"  duplicates: the framework counted {d['framework_duplicates_dropped']} dropped; "
          "the pipeline's output "
          f"{'counts' if d['sdp_output_counts_them'] else 'does not count'} them")
    print(f"  unknown keys (coupon, channel): the framework rescued them in "
          f"{c['extra_keys']['framework_rescued_rows']} bronze rows (_rescued_data); the "
          f"pipeline's orders has only {', '.join(c['extra_keys']['sdp_columns'])}")


def print_equal_work_checks(c: dict[str, Any]) -> None:
    print("the equal-work pipelines' bronze_orders against the framework's bronze:")
    print(f"  {c['bronze_rows']:,} rows from {c['files_in_bronze']} files, against "
          f"{c['framework_bronze_and_quarantine_rows']:,} in bronze.orders and its quarantine; "
          f"{c['malformed_rows_kept']} malformed lines kept whole in _corrupt_record (the "
          f"framework quarantined {c['framework_quarantined_rows']}); {c['rescued_rows']:,} "
          f"rows with _rescued_data (the framework {c['framework_rescued_rows']:,})")
    print(f"  columns: {', '.join(c['columns'])}")
    print(f"  late rows kept: {c['late_rows_kept']}; the cut file named in the output: "
          f"{'yes' if c['unreadable_file_named'] else 'no'}; order files left in landing: "
          f"{c['left_in_landing']} (nothing archived, no ledger, no quarantine, no counts)")


# ---------------------------------------------------------------------- main
def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    work = Path(tempfile.mkdtemp(prefix="bench-peer-sdp-"))
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    errors: dict[str, str] = {}
    result: dict[str, Any] = {}
    pipelines = {"sdp": (sdp_side, "two processes"),
                 "sdp_equal_work": (sdp_equal_work_side, "four processes: bronze, then the "
                                    "rest, twice")}
    try:
        started = time.perf_counter()
        feed, _ = generate(project_at(work / "feed"), orders=args.orders, files=args.files)
        print(f"feed: {feed.files} order files, {feed.records:,} lines, generated once in "
              f"{time.perf_counter() - started:.1f} s; each side reads a copy", flush=True)
        last: dict[str, Any] = {}
        for round_no in range(1, args.rounds + 1):
            order = SIDES if round_no % 2 else SIDES[::-1]
            for side in order:
                root = work / f"{side}-{round_no}"
                shutil.copytree(work / "feed", root)
                label = f"round {round_no} {LABELS[side]:15s}"
                if side == "framework":
                    timed, wall, fw_runs = framework_side(root)
                    print(f"{label} {timed:6.1f} s (runs' duration_s; {wall:6.1f} s in all, "
                          "two processes)", flush=True)
                    last[side] = (root, fw_runs)
                else:
                    run, processes = pipelines[side]
                    try:
                        runs = run(root)
                    except PipelineFailed as exc:
                        errors[side] = str(exc)
                        print(f"{label} failed: {exc}", flush=True)
                        break
                    timed = runs.seconds
                    print(f"{label} {timed:6.1f} s (graph to completed run, {runs.setup:5.1f} s "
                          f"of it to the runs' start; {runs.wall:6.1f} s in all, "
                          f"{runs.start:5.1f} s of it Spark's start, {processes})", flush=True)
                    last[side] = (root, runs.lines)
                seconds[side].append(timed)
            if errors:
                break
            for side in SIDES:  # the last round's roots are compared
                previous = work / f"{side}-{round_no - 1}"
                if round_no > 1 and previous.exists():
                    shutil.rmtree(previous)
        if not errors and "framework" in last:
            result = compare(work, last["framework"][0], last.get("sdp", (None,))[0],
                             last.get("sdp_equal_work", (None,))[0],
                             Feed(**json.loads((work / "feed" / MANIFEST).read_text())),
                             last["framework"][1], last.get("sdp", (None, []))[1],
                             last.get("sdp_equal_work", (None, []))[1])
            if "sdp" in result:
                print_checks(result["sdp"]["checks"])
            if "sdp_equal_work" in result:
                print_equal_work_checks(result["sdp_equal_work"]["checks"])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    medians = {side: median(seconds[side]) for side in SIDES}
    fw = medians["framework"]
    ratios = {side: None if fw is None or medians[side] is None else
              round(medians[side] / fw, 3) for side in SIDES[1:]}
    if fw is not None:
        print(f"median: framework {fw:6.1f} s", flush=True)
        for side in SIDES[1:]:
            if medians[side] is not None:
                print(f"median: {LABELS[side]:15s} {medians[side]:6.1f} s, / framework = "
                      f"{ratios[side]}", flush=True)
    figures = result.get("sdp", {})
    print(json.dumps({
        "benchmark": "peer_sdp", "orders": args.orders, "files": args.files,
        "rounds": args.rounds,
        "sdp_s": [round(s, 1) for s in seconds["sdp"]],
        "sdp_equal_work_s": [round(s, 1) for s in seconds["sdp_equal_work"]],
        "framework_s": [round(s, 1) for s in seconds["framework"]],
        "sdp_median_s": None if medians["sdp"] is None else round(medians["sdp"], 1),
        "sdp_equal_work_median_s": None if medians["sdp_equal_work"] is None
        else round(medians["sdp_equal_work"], 1),
        "framework_median_s": None if fw is None else round(fw, 1),
        **{f"{side}_error": error for side, error in errors.items()},
        **{k: figures[k] for k in ("store_days_differing", "order_ids_only_framework",
                                   "order_ids_only_sdp", "revenue") if k in figures},
        **({"equal_work": {k: v for k, v in result["sdp_equal_work"].items() if k != "checks"}}
           if "sdp_equal_work" in result else {}),
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "ratio": ratios["sdp"],
        "ratio_equal_work": ratios["sdp_equal_work"],
    }))


if __name__ == "__main__":
    main()
