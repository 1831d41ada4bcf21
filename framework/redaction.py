"""What is masked in log events: secret-looking keys, known secret formats, and every secret
value the framework resolved (:func:`register_secret`). The one place both configuration (which
resolves secrets) and logging (which masks them) rely on; it imports neither.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import IO, Any

#: Names of configuration keys whose values are secrets and must be references.
SECRET_KEY_PATTERN = re.compile(
    r"(password|passwd|secret|token|credential|connection[_.-]?string|sas|"
    r"(account|access|api|storage|shared|private|primary|secondary|signing)[_.-]?key|"
    r"^key$|\.key$)",
    re.IGNORECASE,
)


def looks_secret(key: str) -> bool:
    """Whether a configuration key names a secret (its value must then be a reference)."""
    return bool(SECRET_KEY_PATTERN.search(key))


REDACTED = "***"

# Values that are secrets whatever key they sit under.
_VALUE_PATTERNS = (
    re.compile(r"(?i)(AccountKey|SharedAccessSignature|SharedAccessKey|Password|pwd)=([^;\s]+)"),
    re.compile(r"(?i)([?&]sig=)([^&\s]+)"),
    re.compile(r"(?i)(Bearer\s+)([A-Za-z0-9._~+/=-]+)"),
    re.compile(r"(?i)(client_secret=)([^&\s]+)"),
)

#: Spark's own redaction of its settings (the UI's environment page, the event log, ``SET``
#: output): a setting whose key or value matches is shown as ``*********(redacted)``. Spark's
#: default, ``(?i)secret|password|token|access[.]?key``, misses ``fs.azure.account.key.<host>``,
#: SAS tokens, connection strings and Kafka's JAAS line.
SPARK_REDACTION_REGEX = (
    r"(?i)secret|password|passwd|token|access[.]?key|account[.]key|sas[._-]?token|"
    r"sharedaccess|[?&]sig=|credential|connection[._-]?string|jaas|client[._-]?secret|"
    r"private[._-]?key|AccountKey=|api[._-]?key"
)
#: Parts of the strings Spark produces (query plans, ``EXPLAIN``) that are secrets: the known
#: formats above. Spark scans every query plan's text with it, again at each adaptive re-planning,
#: trying the pattern at each position of often long text. The lookahead lets a position through
#: only if its first two characters can begin one of the formats (each format's first two are in its
#: two classes): most positions are refused by two character classes instead of one try per format,
#: and the scan takes a twelfth of the time (bench/plan_redaction.py: 1.04 ms against 0.08 ms per
#: plan of about 15,000 characters). What matches is unchanged.
PLAN_SECRET_LOOKAHEAD = "(?=[aAsSpPbBcC?&][cChHaAwWsSeElL])"
SPARK_STRING_REDACTION_REGEX = (
    r"(?i)" + PLAN_SECRET_LOOKAHEAD + r"(?:"
    r"(AccountKey|SharedAccessSignature|SharedAccessKey|Password|pwd)=[^;\s]+|"
    r"[?&]sig=[^&\s]+|Bearer\s+[A-Za-z0-9._~+/=-]+|client_secret=[^&\s]+|"
    r"password=\"[^\"]*\")"
)


def spark_redaction(conf: dict[str, str] | None = None) -> dict[str, str]:
    """Spark's redaction settings: the patterns above, or-ed with any ``conf`` already has."""
    settings = {}
    for key, ours in (("spark.redaction.regex", SPARK_REDACTION_REGEX),
                      ("spark.sql.redaction.string.regex", SPARK_STRING_REDACTION_REGEX)):
        theirs = (conf or {}).get(key)
        settings[key] = f"(?:{theirs})|(?:{ours})" if theirs and theirs != ours else ours
    return settings


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


class RedactingWriter:
    """A text stream that masks (:func:`redact`) what is written to it."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def redacted_output() -> Iterator[None]:
    """Standard output and error redacted while inside: whatever a command prints (tables,
    summaries, errors, a traceback with ``--log-level debug``) passes here."""
    import sys

    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingWriter(out), RedactingWriter(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
