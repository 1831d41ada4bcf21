"""Bronze's plugin (:mod:`framework.layers`): landing files, or Kafka and Event Hubs records,
into Delta. The spec's model is chosen by ``source.format``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from bronze.commands import add_commands
from bronze.spec import BronzeTableSpec, SourceFormat
from bronze.streams import StreamFormat, StreamTableSpec, kafka_package
from framework.config.model import Layer, Table, TableSpec
from framework.errors import ConfigError
from framework.layers import JobFactory, Kinds, LayerPlugin, Offsets, Planner, Reread

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from framework.job import Job, RunContext


def _job(spec: TableSpec) -> JobFactory:
    if isinstance(spec, StreamTableSpec):
        from bronze.kafka import StreamBronzeJob

        return StreamBronzeJob
    from bronze.job import BronzeJob

    def job(spark: SparkSession, table: Table, ctx: RunContext) -> Job:
        if ctx.operation is not None:  # a refresh: the feed's batches read again
            from bronze.replay import BronzeReplayJob

            return BronzeReplayJob(spark, table, ctx)
        return BronzeJob(spark, table, ctx)

    return job


def planned_schema(spark: SparkSession, table: Table, inputs: Mapping[tuple[Layer, str],
                   StructType]) -> tuple[StructType | None, list[ConfigError]]:
    """The bronze table's schema from its spec alone (``framework.layers.Planner``)."""
    from framework.sqlcheck import parse_schema

    spec = cast(BronzeTableSpec | StreamTableSpec, table.spec)
    if not spec.source.schema_:
        return None, []
    try:
        records = parse_schema(spec.source.schema_)
        if isinstance(spec, StreamTableSpec):
            from bronze.kafka import stream_schema

            return stream_schema(spec, records), []
        from bronze.batch import bronze_schema

        return bronze_schema(spec, records), []
    except (ValueError, ConfigError):  # reported by the parse of the spec's SQL
        return None, []


def _planner() -> Planner:
    return planned_schema


def backlog(table: Table) -> bool | None:
    """Whether files wait in a file feed's landing folder (names Spark's file source reads: none
    starting with '.' or '_'); None for a log of records, whose offsets Spark reads, and for a
    missing landing folder (the feed's job fails, saying so)."""
    from framework.storage import storage_for

    spec = table.spec
    landing = spec.backlog_path(table)
    if not isinstance(spec, BronzeTableSpec) or landing is None:
        return None
    store = storage_for(landing, table.env)
    if not store.exists(spec.landing_folder(table)):
        return None  # (the job says what is missing)
    return store.exists(landing) and any(
        not f.path.rsplit("/", 1)[-1].startswith((".", "_")) for f in store.list_files(landing))


def offsets(table: Table) -> Offsets | None:
    """A Kafka or Event Hubs feed's offsets per topic and partition (:mod:`bronze.offsets`)."""
    spec = table.spec
    if not isinstance(spec, StreamTableSpec):
        return None

    def read(spark: SparkSession) -> list[dict[str, Any]]:
        from bronze.offsets import partition_offsets

        return partition_offsets(spark, [table.location, table.companion_location("quarantine")],
                                 spec.source.topics(), spec.source.client_settings())

    return read


def _reread() -> Reread:
    from bronze.replay import LedgerReread

    return LedgerReread()


KINDS = Kinds(specs={**{f: BronzeTableSpec for f in SourceFormat},
                     **{f: StreamTableSpec for f in StreamFormat}},
              default=SourceFormat.JSON, key="source.format")

PLUGIN = LayerPlugin(layer=Layer.BRONZE, spec=KINDS, job=_job, planner=_planner,
                     commands=add_commands, backlog=backlog, offsets=offsets,
                     reread=_reread, packages=lambda: [kafka_package()])
