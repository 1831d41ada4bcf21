"""Structured logging: structlog events with bound context and secret redaction.

Nothing is configured at import; :func:`configure_logging` is called by the ``medallion``
command (or by a caller embedding the framework). Events go to stderr, so stdout stays free
for results (``medallion sql``, ``medallion status``).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import MutableMapping
from enum import StrEnum
from typing import Any, TextIO

import structlog

from framework.config.secrets import looks_secret

REDACTED = "***"

# Values that are secrets whatever key they sit under.
_VALUE_PATTERNS = (
    re.compile(r"(?i)(AccountKey|SharedAccessSignature|SharedAccessKey|Password|pwd)=([^;\s]+)"),
    re.compile(r"(?i)([?&]sig=)([^&\s]+)"),
    re.compile(r"(?i)(Bearer\s+)([A-Za-z0-9._~+/=-]+)"),
    re.compile(r"(?i)(client_secret=)([^&\s]+)"),
)

_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(value: str) -> None:
    """Mask ``value`` wherever it appears in a log event from now on."""
    if value and len(value) >= 4:
        with _secrets_lock:
            _secrets.add(value)


def redact(value: Any) -> Any:
    """A copy of ``value`` with secret-looking keys and known secret values masked."""
    if isinstance(value, str):
        for secret in tuple(_secrets):
            if secret in value:
                value = value.replace(secret, REDACTED)
        for pattern in _VALUE_PATTERNS:
            value = pattern.sub(lambda m: m.group(1) + REDACTED, value)
        return value
    if isinstance(value, MutableMapping):
        return {
            k: (REDACTED if isinstance(k, str) and looks_secret(k) and v else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    return value


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
