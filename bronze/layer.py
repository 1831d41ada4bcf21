"""Bronze's plugin (:mod:`framework.layers`): landing files into Delta."""

from __future__ import annotations

from bronze.commands import add_commands
from bronze.spec import BronzeTableSpec
from framework.config.model import Layer, TableSpec
from framework.layers import JobFactory, LayerPlugin, Planner


def _job(spec: TableSpec) -> JobFactory:
    from bronze.job import BronzeJob

    return BronzeJob


def _planner() -> Planner:
    from bronze.batch import planned_schema

    return planned_schema


PLUGIN = LayerPlugin(layer=Layer.BRONZE, spec=BronzeTableSpec, job=_job, planner=_planner,
                     commands=add_commands)
