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
from collections.abc import Iterator, Mapping, MutableMapping
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


# A warning a person may see in an ordinary run, said for a person: what happened (formatted
# with the event's fields; without them, the event's reason) and what to do.
HUMAN: dict[str, tuple[str | None, str]] = {
    "bronze.files.failed": (
        "{files_n} file(s) could not be read: {files}",
        "they are set aside under the root's _quarantine/; fix or replace them and land them "
        "again"),
    "bronze.file.redelivered": (
        "{path} was delivered again (batch {earlier_batch} read it)",
        "nothing to do: the copy is kept as {renamed_to}, its rows are not read twice"),
    "bronze.file.already_ingested": (
        "{path} was ingested before", "nothing to do: its rows are not read twice"),
    "bronze.file.redelivery_quarantined": (
        None, "compare it with the earlier copy; land it under a new name if it holds new rows"),
    "bronze.schema.not_added": (
        None, "add the columns to the table's schema (medallion schema --add), or rename them"),
    "silver.batch.wide_event_time": (
        "one batch spans {span} of event time, more than the dedup delay ({delay}): "
        "{rows_at_risk} row(s) that would have been late in a later batch were kept",
        "expected for a backlog (a first run); otherwise run more often"),
    "gold.batch.wide_event_time": (
        "batch {batch_id} spans {span} of event time, more than the watermark ({watermark}): "
        "its rows were all counted",
        "expected for a backlog (a first run); otherwise run more often"),
    "stream.read.may_split_commits": (
        None, "drop max_files_per_trigger / max_bytes_per_trigger from the reading table's spec"),
    "gold.mart.dimension_too_big": (None, "raise the dimension's size limit or filter it"),
    "lake.lease.waiting": ("the lake is held by {holder}", "it starts when that command ends"),
    "lake.lease.taken_over": (None, "nothing to do: the earlier command had stopped"),
}
# Bound context a short line leaves out (the table leads it; the rest is in the JSON logs).
_CONTEXT = ("timestamp", "level", "event", "env", "layer", "table", "run_id", "logger",
            "exception", "reason", "hint", "error")


class HumanRenderer:
    """Events for a person at a terminal: info and debug as structlog's console renders them;
    a warning or an error as one short line, ``warning: <table>: <what>; <what to do>`` (said
    as :data:`HUMAN` says, else by the event's reason and fields, and its ``hint``), its stack
    (there with ``--log-level debug`` only) below."""

    def __init__(self, colors: bool = False) -> None:
        self._console = structlog.dev.ConsoleRenderer(colors=colors)

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        level = str(event_dict.get("level", method))
        if level not in ("warning", "error", "critical"):
            return str(self._console(logger, method, event_dict))
        event = str(event_dict.get("event", ""))
        subject = event_dict.get("table") or event_dict.get("source")
        what, advice = HUMAN.get(event, (None, None))
        said = _said(what, event_dict) if what else None
        if said is None:
            reason = str(event_dict.get("reason") or event_dict.get("error") or "")
            details = ", ".join(f"{k}={_short(v)}" for k, v in event_dict.items()
                                if k not in _CONTEXT)
            said = (f"{_short(reason, 200)} ({event}: {details})" if reason and details else
                    f"{_short(reason, 200)} ({event})" if reason else
                    f"{event} ({details})" if details else event)
        advice = event_dict.get("hint") or (_said(advice, event_dict) if advice else None)
        line = f"{'warning' if level == 'warning' else 'error'}: " \
            + (f"{subject}: " if subject else "") + said + (f"; {advice}" if advice else "")
        if event_dict.get("exception"):
            line += "\n" + str(event_dict["exception"])
        return line


def _said(template: str, event_dict: MutableMapping[str, Any]) -> str | None:
    """``template`` with the event's fields (a list's: its length as ``<name>_n``, its items
    joined); None when it names a field the event lacks."""
    fields: dict[str, Any] = {}
    for key, value in event_dict.items():
        if isinstance(value, Mapping):  # (files and their reasons: each file's first words)
            value = [f"{str(k).rsplit('/', 1)[-1]} ({_short(v, 60)})" for k, v in value.items()]
        if isinstance(value, list | tuple | set | frozenset):
            fields[f"{key}_n"] = len(value)
            items = sorted(str(v).rsplit("/", 1)[-1] if "(" not in str(v) else str(v)
                           for v in value)
            value = ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3
                                            else "")
        elif isinstance(value, str) and "/" in value and key in ("path", "renamed_to"):
            value = value.rsplit("/", 1)[-1]
        fields[key] = value
    try:
        return template.format(**fields)
    except (KeyError, IndexError, ValueError):
        return None


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
