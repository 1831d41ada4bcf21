"""Why a JSON line bronze quarantines is malformed, in words: two values on one line, ``NaN``, a
key twice in an object, an array where an object was expected; and why no line of a file
parsed when the file is one JSON document (an array, a pretty-printed object).

Spark parses every line (:mod:`bronze.reading`); these functions only explain the lines it
already refused, so a batch without a malformed line never calls them. They read the line as
strict JSON (RFC 8259) with Python's :mod:`json` (``NaN`` and duplicate keys refused by hooks,
a second value found by ``raw_decode``), and return None when they find nothing more
specific than :data:`MALFORMED` (a line cut short, text that is not JSON, an object whose
values do not fit the schema without a rescued column).

Only the standard library is imported: :func:`json_reason` runs in Spark's Python workers
(a UDF over the quarantined rows, :func:`bronze.reading.malformed_reason`), which import this
module.

Duplicate keys. RFC 8259 says an object's names SHOULD be unique and leaves a reader free to
take the last value, the first, or to fail. Spark's variant parser (which gives bronze each
line's keys and their JSON types, :func:`bronze.reading.one_json_value`) fails on them.
Bronze keeps quarantining such a line, whole, rather than allow them: a row holds one value
per column, so taking the line would keep one of the two values and drop the other without a
trace, while the quarantine keeps the line as written for whoever knows which value is meant.
The reason says so.
"""

from __future__ import annotations

import json
from typing import Any

MALFORMED = "malformed record: does not parse against the schema"
TWO_VALUES = ("malformed record: expected one JSON value, found two or more (JSON Lines hold one "
              "object per line)")
DUPLICATE_KEY = ("malformed record: expected distinct keys in a JSON object, found {key} twice "
                 "(kept whole here: taking the line would drop one of the two values)")
NON_NUMBER = ("malformed record: expected JSON numbers, found {token} (RFC 8259 has no NaN or "
              "Infinity; options.allowNonNumericNumbers: 'true' reads them)")
NOT_OBJECT = "malformed record: expected a JSON object, found a JSON {kind}"
# What a file whose lines did not parse holds, when it is one JSON document.
FILE_NOT_LINES = "the file is one JSON {kind}; bronze reads JSON Lines, one object per line"
FILE_ONE_OBJECT = ("the file is one JSON object over several lines; bronze reads JSON Lines, one "
                   "object per line")

KEY_SHOWN = 100  # characters of a duplicate key shown in the reason

_WHITESPACE = " \t\r\n"  # JSON's (RFC 8259)


class _Problem(Exception):
    """Raised when a value parses as JSON but breaks one of the strict rules (the reason)."""


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            shown = json.dumps(key, ensure_ascii=False)
            if len(shown) > KEY_SHOWN:
                shown = shown[:KEY_SHOWN] + '..."'
            raise _Problem(DUPLICATE_KEY.format(key=shown))
        seen[key] = value
    return seen


def _non_number(token: str) -> Any:
    raise _Problem(NON_NUMBER.format(token=token))


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_non_number)


def _first_value(text: str) -> tuple[Any, int]:
    """The first JSON value of ``text`` (after whitespace) and where it ends; raises
    :class:`_Problem` for a strict rule broken, ValueError for text that is not JSON."""
    start = len(text) - len(text.lstrip(_WHITESPACE))
    return _DECODER.raw_decode(text, start)


def json_reason(text: str | None) -> str | None:
    """Why ``text``, a JSON line, is not one JSON object of strict JSON (a reason starting with
    ``malformed record: ``), or None when nothing more specific than :data:`MALFORMED` applies.
    """
    if text is None:
        return None
    try:
        value, end = _first_value(text)
        rest = text[end:].lstrip(_WHITESPACE)
        if rest:
            _first_value(rest)  # a second value (else: trailing text, not JSON)
            return TWO_VALUES
    except _Problem as problem:
        return str(problem)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return NOT_OBJECT.format(kind=_kind(value))
    return None


def file_reason(text: str) -> str | None:
    """What a file of JSON lines none of which parsed holds, when its whole text is one JSON
    document (an array, an object over several lines...), or None."""
    try:
        value, end = _first_value(text)
    except (_Problem, ValueError, RecursionError):
        return None
    if text[end:].strip(_WHITESPACE):
        return None
    if isinstance(value, dict):  # (an object on one line is a JSON line: its own reason says)
        return FILE_ONE_OBJECT if "\n" in text.strip(_WHITESPACE) else None
    return FILE_NOT_LINES.format(kind=_kind(value))
