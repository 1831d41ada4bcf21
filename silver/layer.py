"""Silver's plugin (:mod:`framework.layers`): typed, checked, deduplicated tables."""

from __future__ import annotations

from framework.config.model import Layer, TableSpec
from framework.layers import JobFactory, LayerPlugin, Planner
from silver.commands import add_commands
from silver.spec import SilverTableSpec


def _job(spec: TableSpec) -> JobFactory:
    from silver.job import SilverJob

    return SilverJob


def _planner() -> Planner:
    from silver.job import planned_schema

    return planned_schema


PLUGIN = LayerPlugin(layer=Layer.SILVER, spec=SilverTableSpec, job=_job, planner=_planner,
                     commands=add_commands)
