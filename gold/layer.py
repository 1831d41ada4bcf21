"""Gold's plugin (:mod:`framework.layers`): windowed aggregates, and marts over them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from framework.config.model import Layer, Table, TableSpec
from framework.errors import ConfigError
from framework.layers import JobFactory, LayerPlugin, Planner
from gold.spec import GOLD_KINDS, GoldSpec, Kind

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


def _aggregate_job() -> JobFactory:
    from gold.job import AggregateJob

    return AggregateJob


def _mart_job() -> JobFactory:
    from gold.mart import MartJob

    return MartJob


# The job class of each kind of gold table, imported when asked for.
JOBS: dict[Kind, Callable[[], JobFactory]] = {Kind.AGGREGATE: _aggregate_job,
                                              Kind.MART: _mart_job}


def _job(spec: TableSpec) -> JobFactory:
    assert isinstance(spec, GoldSpec)
    return JOBS[spec.kind]()


def _planner() -> Planner:
    from gold import job, mart

    planners: dict[Kind, Planner] = {Kind.AGGREGATE: job.planned_schema,
                                     Kind.MART: mart.planned_schema}

    def planned_schema(spark: SparkSession, table: Table,
                       inputs: Mapping[tuple[Layer, str], StructType]
                       ) -> tuple[StructType | None, list[ConfigError]]:
        assert isinstance(table.spec, GoldSpec)
        return planners[table.spec.kind](spark, table, inputs)

    return planned_schema


PLUGIN = LayerPlugin(layer=Layer.GOLD, spec=GOLD_KINDS, job=_job, planner=_planner)
