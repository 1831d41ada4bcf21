"""Gold's plugin (:mod:`framework.layers`): windowed aggregates, and marts over them."""

from __future__ import annotations

from framework.config.model import Layer, TableSpec
from framework.layers import JobFactory, LayerPlugin, Planner
from gold.spec import GoldTableSpec, Kind


def _job(spec: TableSpec) -> JobFactory:
    assert isinstance(spec, GoldTableSpec)
    if spec.kind is Kind.MART:
        from gold.mart import MartJob

        return MartJob
    from gold.job import AggregateJob

    return AggregateJob


def _planner() -> Planner:
    from gold.job import planned_schema

    return planned_schema


PLUGIN = LayerPlugin(layer=Layer.GOLD, spec=GoldTableSpec, job=_job, planner=_planner)
