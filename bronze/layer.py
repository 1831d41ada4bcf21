"""Bronze's plugin (:mod:`framework.layers`): landing files, or Kafka and Event Hubs records,
into Delta. The spec's model is chosen by ``source.format``."""

from __future__ import annotations

from bronze.commands import add_commands
from bronze.spec import BronzeTableSpec, SourceFormat
from bronze.streams import StreamFormat, StreamTableSpec
from framework.config.model import Layer, TableSpec
from framework.layers import JobFactory, Kinds, LayerPlugin, Planner


def _job(spec: TableSpec) -> JobFactory:
    if isinstance(spec, StreamTableSpec):
        from bronze.kafka import StreamBronzeJob

        return StreamBronzeJob
    from bronze.job import BronzeJob

    return BronzeJob


def _planner() -> Planner:
    from bronze.batch import planned_schema

    return planned_schema


KINDS = Kinds(specs={**{f: BronzeTableSpec for f in SourceFormat},
                     **{f: StreamTableSpec for f in StreamFormat}},
              default=SourceFormat.JSON, key="source.format")

PLUGIN = LayerPlugin(layer=Layer.BRONZE, spec=KINDS, job=_job, planner=_planner,
                     commands=add_commands)
