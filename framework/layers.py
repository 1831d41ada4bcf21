"""The layer registry: what a layer package plugs into the framework.

A layer is a package that declares a :class:`LayerPlugin` under the entry point group
``medallion.layers`` of its distribution (``setup.cfg``)::

    [options.entry_points]
    medallion.layers =
        bronze = bronze.layer:PLUGIN

The plugin gives:

- ``spec``: the pydantic model of the layer's table specs (``conf/tables/<layer>/*.yaml``), or,
  for a layer with several kinds of table, :class:`Kinds`: a model per value of the layer's
  kind Enum, chosen by the spec's ``kind`` key (or another, ``source.format`` say);
- ``job``: the job class that runs a table, from its spec (chosen by kind where there are several);
- ``planner``: how ``medallion validate`` derives a table's schema from its inputs' (optional);
- ``commands``: the layer's own ``medallion`` sub-commands (optional);
- ``backlog``: whether input waits in a table's own source, read without Spark (optional: a
  layer without one reads only other tables, whose new commits the framework sees itself); None
  when only Spark can tell (a log of records' offsets), and the table then always runs;
- ``offsets``: how ``medallion status`` reads the offsets a table reached in its log of records
  (:data:`Offsets`; optional, and None for a table without them);
- ``reread``: how ``medallion refresh`` rereads the inputs of a table rebuilt by
  ``RebuildMethod.REREAD`` (:class:`Reread`; optional);
- ``packages``: the Maven coordinates of the jars the layer's jobs need besides Delta's (a
  source's connector, say), which every session starts with (optional).

The framework imports no layer package by name: it finds the plugins through the entry points,
on first use. A plugin's module imports no Spark; its job classes and planner are imported when
asked for.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol

from framework.config.model import Layer
from framework.errors import ConfigError, WrongTypeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from framework.config.model import Table, TableSpec
    from framework.job import RunContext, TableRunSummary
    from framework.timeslice import TimeSlice

GROUP = "medallion.layers"


class Job(Protocol):
    """What the runner needs of a table's job."""

    def run(self) -> TableRunSummary: ...


JobFactory = Callable[["SparkSession", "Table", "RunContext"], Job]

# (spark, table, the schemas of the tables already planned) -> (the table's schema, or None
# when its columns cannot be known before it runs; the problems found resolving its SQL)
Planner = Callable[["SparkSession", "Table", "Mapping[tuple[Layer, str], StructType]"],
                   "tuple[StructType | None, list[ConfigError]]"]

# (spark) -> per topic and partition of a table's log of records: the offset reached
# (``committed``), the ``latest`` and the ``lag``
Offsets = Callable[["SparkSession"], "list[dict[str, Any]]"]


class Reread(Protocol):
    """How a layer reads a table's inputs again, batch by batch, for ``medallion refresh`` (the
    table emptied, its checkpoint kept): all of them, or those delivered in ``since``."""

    def problem(self, spark: SparkSession, table: Table, since: TimeSlice | None) -> str | None:
        """Why they cannot be read again now (what they would be read from is gone), found
        before anything is emptied; None: they can."""

    def where(self, spark: SparkSession, table: Table, since: TimeSlice) -> str | None:
        """A SQL predicate over the table's Delta tables (its own, its companions) that holds
        for the rows a reread of ``since`` writes again; None: nothing of it was fed."""


class Commands(Protocol):
    """Where a layer adds its ``medallion`` sub-commands (:class:`framework.commands.Commands`):
    each gets the common options and a handler ``(args) -> exit code``."""

    def add(self, name: str, handler: Callable[[argparse.Namespace], int], *, help: str,
            description: str) -> argparse.ArgumentParser: ...


@dataclass(frozen=True)
class Kinds:
    """A layer's kinds of table: the spec model of each value of the layer's kind Enum, chosen
    by the spec's ``kind`` key (``default`` when it has none). Each model declares its own
    ``kind`` as a ``Literal`` of its value."""

    specs: Mapping[StrEnum, type[TableSpec]]
    default: StrEnum
    key: str = "kind"  # a dotted path reaches into the spec: "source.format"

    def model(self, data: Mapping[str, Any]) -> type[TableSpec]:
        """The model for the spec ``data``; a clear error for a kind the layer does not have."""
        value: Any = data
        for part in self.key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        value = self.default.value if value is None else value
        for kind, model in self.specs.items():
            if value == kind.value:
                return model
        valid = ", ".join(kind.value for kind in self.specs)
        raise WrongTypeError(f"expected one of {valid}, found {value!r}", key=self.key)


@dataclass(frozen=True)
class LayerPlugin:
    """A layer's implementation (see the module's text)."""

    layer: Layer
    spec: type[TableSpec] | Kinds
    job: Callable[[TableSpec], JobFactory]
    planner: Callable[[], Planner] | None = None
    commands: Callable[[Commands], None] | None = None
    backlog: Callable[[Table], bool | None] | None = None
    offsets: Callable[[Table], Offsets | None] | None = None
    reread: Callable[[], Reread] | None = None
    packages: Callable[[], list[str]] | None = None

    @property
    def models(self) -> list[type[TableSpec]]:
        """Every spec model of the layer (one per kind of table)."""
        if isinstance(self.spec, Kinds):  # several kinds may share a model
            return list(dict.fromkeys(self.spec.specs.values()))
        return [self.spec]


@functools.cache
def plugins() -> Mapping[Layer, LayerPlugin]:
    """The installed layers' plugins, in the layers' order."""
    found: dict[Layer, LayerPlugin] = {}
    for ep in entry_points(group=GROUP):
        plugin = ep.load()
        if not isinstance(plugin, LayerPlugin):
            raise ConfigError(f"expected a LayerPlugin at entry point {ep.value} ({GROUP}), "
                              f"found {type(plugin).__name__}")
        found[plugin.layer] = plugin
    return {layer: found[layer] for layer in Layer if layer in found}


def plugin(layer: Layer) -> LayerPlugin:
    """The plugin of ``layer``; a clear error if no installed package implements it."""
    installed = plugins()
    try:
        return installed[layer]
    except KeyError:
        valid = ", ".join(layer.value for layer in installed) or "none"
        raise ConfigError(
            f"expected a layer with an implementation ({valid}), found {layer.value!r}; a "
            f"layer package registers itself under the entry point group {GROUP!r} (install "
            "the package: pip install -e .)"
        ) from None


def spec_model(layer: Layer, data: Mapping[str, Any]) -> type[TableSpec]:
    """The pydantic model that validates the table spec ``data`` of ``layer``."""
    spec = plugin(layer).spec
    return spec.model(data) if isinstance(spec, Kinds) else spec


def job_class(table: Table) -> JobFactory:
    """The job class that runs ``table``."""
    return plugin(table.layer).job(table.spec)


def backlog_of(table: Table) -> bool | None:
    """Whether input waits in ``table``'s own source (see :class:`LayerPlugin`)."""
    backlog = plugin(table.layer).backlog
    return backlog(table) if backlog is not None else False


def offsets_of(table: Table) -> Offsets | None:
    """How to read the offsets of ``table``'s log of records; None: it has none."""
    offsets = plugin(table.layer).offsets
    return offsets(table) if offsets is not None else None


def reread_of(table: Table) -> Reread:
    """How ``table``'s inputs are read again; a clear error when its layer does not say."""
    make = plugin(table.layer).reread
    if make is None:
        raise ConfigError(f"expected the {table.layer.value} layer to say how a refresh reads "
                          f"{table.full_name}'s inputs again (LayerPlugin.reread), as its spec "
                          f"rebuilds it by rereading them; found nothing")
    return make()


def layer_packages() -> list[str]:
    """The Maven coordinates every installed layer asks for (see :class:`LayerPlugin`)."""
    return list(dict.fromkeys(p for plugin in plugins().values() if plugin.packages
                              for p in plugin.packages()))


def planner(layer: Layer) -> Planner | None:
    """How ``medallion validate`` derives a table's schema in ``layer``; None if it cannot."""
    make = plugin(layer).planner
    return make() if make is not None else None
