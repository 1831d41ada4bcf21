"""What is masked in log events: secret-looking keys, known secret formats, and every secret
value the framework resolved (:func:`register_secret`).

The one place both configuration (which resolves secrets) and logging (which masks them) rely
on; it imports neither.
"""

from __future__ import annotations

import re
import threading
from collections.abc import MutableMapping
from typing import Any

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
