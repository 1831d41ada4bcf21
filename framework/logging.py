"""Structured logging: structlog events with bound context and secret redaction.

Nothing is configured at import; :func:`configure_logging` is called by the ``medallion``
command (or by a caller embedding the framework). Events go to stderr, so stdout stays free
for results (``medallion sql``, ``medallion status``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, MutableMapping
from datetime import UTC, datetime
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

    AUTO = "auto"  # $MEDALLION_LOG_FORMAT; else console when stderr is a terminal, JSON otherwise
    JSON = "json"
    CONSOLE = "console"


# The format a command chose, for the processes it starts: they render as it does rather than
# by their own stderr (a child's stderr is often a pipe the parent reads, at a terminal too).
LOG_FORMAT_ENV = "MEDALLION_LOG_FORMAT"


def inherited_format() -> LogFormat | None:
    """The format ``$MEDALLION_LOG_FORMAT`` names (json or console), or None."""
    value = os.environ.get(LOG_FORMAT_ENV, "").strip().lower()
    return LogFormat(value) if value in (LogFormat.JSON, LogFormat.CONSOLE) else None


def resolve_format(fmt: LogFormat | str, out: TextIO) -> LogFormat:
    """``auto`` made json or console: the inherited format, else by whether ``out`` is a
    terminal."""
    fmt = LogFormat(fmt)
    if fmt is LogFormat.AUTO:
        fmt = inherited_format() or (LogFormat.CONSOLE if out.isatty() else LogFormat.JSON)
    return fmt


# What to do about a warning a person may see in an ordinary run (the short line's end).
ADVICE: dict[str, str] = {
    "bronze.files.failed": "the files are set aside under the root's _quarantine/; fix or "
                           "replace them and land them again",
    "bronze.file.redelivered": "nothing to do: the copy is kept under its new name, its rows "
                               "are not read twice",
    "bronze.file.already_ingested": "nothing to do: its rows are not read twice",
    "bronze.file.redelivery_quarantined": "compare it with the earlier copy; land it under a "
                                          "new name if it holds new rows",
    "bronze.schema.not_added": "add the columns to the table's schema, or rename them",
    "stream.read.may_split_commits": "drop max_files_per_trigger / max_bytes_per_trigger "
                                     "from the reading table's spec",
    "gold.mart.dimension_too_big": "raise the dimension's size limit or filter it",
    "lake.lease.waiting": "it starts when that command ends",
    "lake.lease.taken_over": "nothing to do: the earlier command had stopped",
}
# Bound context a short line leaves out (the table leads it; the rest is in the JSON logs).
_CONTEXT = ("timestamp", "level", "event", "env", "layer", "table", "run_id", "logger",
            "exception", "reason", "hint")


class HumanRenderer:
    """Events for a person at a terminal: info and debug as structlog's console renders them;
    a warning or an error as one short line, ``warning: <table>: <what>; <what to do>`` (the
    event's ``hint``, or :data:`ADVICE`), its stack (there with ``--log-level debug`` only)
    below."""

    def __init__(self, colors: bool = False) -> None:
        self._console = structlog.dev.ConsoleRenderer(colors=colors)

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        level = str(event_dict.get("level", method))
        if level not in ("warning", "error", "critical"):
            return str(self._console(logger, method, event_dict))
        event = str(event_dict.get("event", ""))
        subject = event_dict.get("table") or event_dict.get("source")
        what = str(event_dict.get("reason") or event_dict.get("error") or event)
        details = ", ".join(f"{k}={_short(v)}" for k, v in event_dict.items()
                            if k not in _CONTEXT and k != "error")
        if what == event:
            said = f"{event} ({details})" if details else event
        else:
            said = f"{_short(what, 200)} ({event}: {details})" if details else \
                f"{_short(what, 200)} ({event})"
        line = f"{'warning' if level == 'warning' else 'error'}: " \
            + (f"{subject}: " if subject else "") + said
        advice = event_dict.get("hint") or ADVICE.get(event)
        if advice:
            line += f"; {advice}"
        if event_dict.get("exception"):
            line += "\n" + str(event_dict["exception"])
        return line


def _short(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def configure_logging(
    fmt: LogFormat | str = LogFormat.AUTO, level: str = "info", stream: TextIO | None = None
) -> LogFormat:
    """Configure structlog for the process: JSON for jobs, readable output for a person;
    returns the format chosen (``auto`` resolved)."""
    out = stream if stream is not None else sys.stderr
    fmt = resolve_format(fmt, out)
    renderer: Any
    if fmt is LogFormat.JSON:
        renderer = structlog.processors.JSONRenderer(default=str)
    else:
        renderer = HumanRenderer(colors=out.isatty())
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


def output_event(event: str, stream: TextIO | None = None, **fields: Any) -> None:
    """What a command says, as one JSON event line (event, level, timestamp and ``fields``,
    redacted) on ``stream`` (default stdout), whatever the log level: the JSON form of a line
    it prints for a person."""
    record = {"event": event, "level": "info",
              "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), **fields}
    out = stream if stream is not None else sys.stdout
    out.write(json.dumps(redact(record), default=str) + "\n")
    out.flush()


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
