"""The registry of layers: which spec class and which job class implement each one.

Entries are import paths, imported on first use, so importing ``framework`` imports no layer
(and no Spark). A layer without an entry is reported as such, with the ones that exist.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from framework.config.model import Layer
from framework.errors import ConfigError

if TYPE_CHECKING:
    from framework.config.model import TableSpec
    from framework.job import StreamingJob


@dataclass(frozen=True)
class LayerEntry:
    """Where a layer's table spec model and its job class live."""

    spec: str
    job: str


REGISTRY: dict[Layer, LayerEntry] = {
    Layer.BRONZE: LayerEntry(spec="bronze.spec:BronzeTableSpec", job="bronze.job:BronzeJob"),
    Layer.SILVER: LayerEntry(spec="silver.spec:SilverTableSpec", job="silver.job:SilverJob"),
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


def job_class(layer: Layer) -> type[StreamingJob]:
    """The job class that runs a table of ``layer``."""
    cls: type[StreamingJob] = _load(_entry(layer).job)
    return cls


def available() -> tuple[Layer, ...]:
    return tuple(layer for layer in Layer if layer in REGISTRY)
