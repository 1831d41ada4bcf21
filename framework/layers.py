"""The registry of layers: which spec class and which job class implement each one.

Entries are import paths, imported on first use, so importing ``framework`` imports no layer
(and no Spark). A layer without an entry is reported as such, with the ones that exist.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from framework.config.model import Layer
from framework.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from framework.config.model import Table, TableSpec
    from framework.job import RunContext, TableRunSummary


@dataclass(frozen=True)
class LayerEntry:
    """Where a layer's table spec model and its job class live; ``kinds`` maps a spec's
    ``kind`` to another job class (gold's marts are not streaming aggregates)."""

    spec: str
    job: str
    kinds: Mapping[str, str] = field(default_factory=dict)
    plan: str = ""  # a Planner: the table's schema from its inputs', for medallion validate


class Job(Protocol):
    """What the runner needs of a table's job."""

    def run(self) -> TableRunSummary: ...


# (spark, table, the schemas of the tables already planned) -> (the table's schema, or None
# when its columns cannot be known before it runs; the problems found resolving its SQL)
Planner = Callable[["SparkSession", "Table", "Mapping[tuple[Layer, str], StructType]"],
                   "tuple[StructType | None, list[ConfigError]]"]


REGISTRY: dict[Layer, LayerEntry] = {
    Layer.BRONZE: LayerEntry(spec="bronze.spec:BronzeTableSpec", job="bronze.job:BronzeJob",
                             plan="bronze.batch:planned_schema"),
    Layer.SILVER: LayerEntry(spec="silver.spec:SilverTableSpec", job="silver.job:SilverJob",
                             plan="silver.job:planned_schema"),
    Layer.GOLD: LayerEntry(spec="gold.spec:GoldTableSpec", job="gold.job:AggregateJob",
                           kinds={"mart": "gold.mart:MartJob"}, plan="gold.job:planned_schema"),
}


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _entry(layer: Layer) -> LayerEntry:
    try:
        return REGISTRY[layer]
    except KeyError:
        valid = ", ".join(sorted(layer.value for layer in REGISTRY))
        raise ConfigError(
            f"expected a layer with an implementation ({valid}), found {layer.value!r}"
        ) from None


def spec_class(layer: Layer) -> type[TableSpec]:
    """The pydantic model that validates a table spec of ``layer``."""
    cls: type[TableSpec] = _load(_entry(layer).spec)
    return cls


def job_class(table: Table) -> Callable[[SparkSession, Table, RunContext], Job]:
    """The job class that runs ``table`` (by its layer, and its spec's kind if any)."""
    entry = _entry(table.layer)
    kind = str(getattr(table.spec, "kind", ""))
    cls: Callable[[SparkSession, Table, RunContext], Job] = _load(entry.kinds.get(kind,
                                                                                  entry.job))
    return cls


def planner(layer: Layer) -> Planner | None:
    """How ``medallion validate`` derives a table's schema in ``layer``; None if it cannot."""
    path = _entry(layer).plan
    return _load(path) if path else None


def available() -> tuple[Layer, ...]:
    return tuple(layer for layer in Layer if layer in REGISTRY)
