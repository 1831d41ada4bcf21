"""Names in SQL text: every table, column and path the framework writes into a statement goes
through :func:`quote` (or :func:`quote_name`, :func:`quote_path`), so a name is always read as
one name, whatever characters it holds.

Spark SQL quotes an identifier in backticks, a backtick inside it doubled: the name
a`b is written `a``b`. Configured table names are validated identifiers already; column names
come from schemas (a feed's DDL, the catalog) and from the command line, and may hold anything.
"""

from __future__ import annotations

from collections.abc import Iterable


def quote(identifier: str) -> str:
    """One identifier, quoted: read by Spark as exactly ``identifier``."""
    return "`" + identifier.replace("`", "``") + "`"


def quote_name(name: str) -> str:
    """A multi-part name (``catalog.schema.table``) of validated identifiers, each quoted."""
    return ".".join(quote(part) for part in name.split("."))


def quote_all(identifiers: Iterable[str]) -> str:
    """Identifiers quoted, separated by commas (a column list)."""
    return ", ".join(quote(i) for i in identifiers)


def quote_path(location: str) -> str:
    """A Delta table by its location, as a table name (``delta.`<location>```)."""
    return f"delta.{quote(location)}"
