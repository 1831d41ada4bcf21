"""Structured logging: structlog events with bound context and secret redaction.

Nothing is configured at import; :func:`configure_logging` is called by the ``medallion``
command (or by a caller embedding the framework). Events go to stderr, so stdout stays free
for results (``medallion sql``, ``medallion status``).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator, MutableMapping
from enum import StrEnum
from typing import Any, TextIO

import structlog

from framework.redaction import redact


def redact_processor(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: runs after exceptions are rendered, so tracebacks are masked too."""
    return redact(event_dict)


class LogFormat(StrEnum):
    """How events are rendered."""

    AUTO = "auto"  # console when stderr is a terminal, JSON otherwise
    JSON = "json"
    CONSOLE = "console"


def configure_logging(
    fmt: LogFormat | str = LogFormat.AUTO, level: str = "info", stream: TextIO | None = None
) -> LogFormat:
    """Configure structlog for the process: JSON for jobs, readable output for a person;
    returns the format chosen (``auto`` resolved)."""
    out = stream if stream is not None else sys.stderr
    fmt = LogFormat(fmt)
    if fmt is LogFormat.AUTO:
        fmt = LogFormat.CONSOLE if out.isatty() else LogFormat.JSON
    renderer: Any
    if fmt is LogFormat.JSON:
        renderer = structlog.processors.JSONRenderer(default=str)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            redact_processor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        # one write per line: Spark's JVM shares stderr, and must not land inside an event
        logger_factory=structlog.WriteLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    return fmt


def get_logger(**context: Any) -> Any:
    """A structlog logger with ``context`` bound once (layer, table, run_id...)."""
    return structlog.get_logger("medallion").bind(**context)


@contextlib.contextmanager
def timed(into: dict[str, float], step: str) -> Iterator[None]:
    """Add the seconds spent inside to ``into[step]`` (for logs: where a run's time goes)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        into[step] = round(into.get(step, 0.0) + time.perf_counter() - started, 3)
