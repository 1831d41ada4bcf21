"""The package's errors: one root, :class:`MedallionError`, and specific subclasses.

Every error message names what was expected and what was found. Configuration problems are
gathered while loading and raised together as one :class:`ConfigValidationError`, whose
``errors`` hold one specific :class:`ConfigError` per problem (file and key path included).
"""

from __future__ import annotations

from collections.abc import Sequence

from framework.redaction import redact


class MedallionError(Exception):
    """Raised for any failure the framework detects; the root of every error in the package.
    Its text is redacted (:func:`framework.redaction.redact`): a message quoting a connection
    string or a resolved secret never shows it, wherever it is printed."""

    def __str__(self) -> str:
        return redact(super().__str__())


# --------------------------------------------------------------------------- configuration
class ConfigError(MedallionError):
    """Raised when one configuration value is invalid; carries the file and the key path."""

    kind = "invalid value"

    def __init__(self, message: str, *, file: str = "", key: str = "") -> None:
        super().__init__(message)
        self.file = file
        self.key = key
        self.detail = message

    def __str__(self) -> str:
        where = ":".join(part for part in (self.file, self.key) if part)
        return redact(f"{where}: {self.detail}" if where else self.detail)


class UnknownKeyError(ConfigError):
    """Raised when a configuration mapping holds a key the schema does not define."""

    kind = "unknown key"


class WrongTypeError(ConfigError):
    """Raised when a configuration value has the wrong type (a list where a mapping belongs...)."""

    kind = "wrong type"


class MissingKeyError(ConfigError):
    """Raised when a required configuration key is absent."""

    kind = "missing key"


class InvalidIdentifierError(ConfigError):
    """Raised when a table, schema or catalog name is not a plain SQL identifier."""

    kind = "invalid identifier"


class MissingSecretError(ConfigError):
    """Raised when a ``${VAR}`` reference names an environment variable that is not set."""

    kind = "missing secret"


class MissingVariableError(ConfigError):
    """Raised when a ``${VAR}`` in a plain (non-secret) value names an unset variable."""

    kind = "missing variable"


class LiteralSecretError(ConfigError):
    """Raised when a secret field holds a literal value instead of a secret reference."""

    kind = "literal secret"


class DuplicateTableError(ConfigError):
    """Raised when two table specs resolve to the same catalog table (or checkpoint)."""

    kind = "duplicate table"


class ConfigValidationError(ConfigError):
    """Raised once per load when any configuration problem was found; lists all of them."""

    kind = "invalid configuration"

    def __init__(self, errors: Sequence[ConfigError], notes: Sequence[str] = ()) -> None:
        self.errors: tuple[ConfigError, ...] = tuple(errors)
        lines = [f"{len(self.errors)} configuration problem(s):"]
        lines += [f"  - [{e.kind}] {e}" for e in self.errors]
        lines += notes  # what could not be checked because of them
        super().__init__("\n".join(lines))
        self.detail = "\n".join(lines)

    def of_kind(self, kind: type[ConfigError]) -> list[ConfigError]:
        """The gathered errors of one class (a convenience for callers and tests)."""
        return [e for e in self.errors if isinstance(e, kind)]


# --------------------------------------------------------------------------- runtime
class SessionError(MedallionError):
    """Raised when a SparkSession cannot be created or lacks what the framework needs."""


class DeltaNotAvailableError(SessionError):
    """Raised when Delta Lake's classes are not on the driver's classpath (spark-submit)."""


class JobError(MedallionError):
    """Raised when a job step fails; names the table and the step, chained from the cause, which
    is quoted by its :func:`first_line` (the rest is kept in the chained cause, for a debugger
    or a log at debug level)."""

    def __init__(self, table: str, step: str, cause: BaseException | str) -> None:
        self.table = table
        self.step = step
        text = cause if isinstance(cause, str) else first_line(cause)
        super().__init__(f"{table}: step '{step}' failed: {text}")


def first_line(exc: BaseException) -> str:
    """The first line of an error's message that says what went wrong (see :func:`message_line`),
    or the error's class when its message is empty."""
    return message_line(str(exc)) or type(exc).__name__


def message_line(message: str) -> str:
    """The first non-blank line of an error's message (Spark's errors carry the plan and the
    JVM's stack after it; a parse error's message starts on its second line), with the JVM's
    exception after Py4J's words and a Python function's exception in place of its traceback."""
    raw = [line for line in message.splitlines() if line.strip()]
    lines = [line.strip() for line in raw]
    if len(lines) > 1 and lines[0].startswith("An error occurred while calling"):
        # Py4J's own words; the JVM's exception (": java.lang...: what") is on the next line
        return f"{lines[0]} {lines[1].removeprefix(': ')}"
    if lines and lines[0].endswith(_TRACEBACK):
        # a Python function's error told through the JVM (a foreachBatch function's): its own
        # exception closes the traceback that follows
        head = lines[0].removesuffix(_TRACEBACK).rstrip()
        return f"{head} {_python_exception(raw[1:])}".strip()
    return lines[0] if lines else ""


_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def _python_exception(lines: list[str]) -> str:
    """The exception line of the Python traceback ``lines`` start in: the first line not indented
    as a frame is, or, for a chain of them (Python's "During handling of..."), the chain's last."""
    found = "(no exception line)"
    heads = [line for line in lines if not line[:1].isspace() and not line.startswith(_TRACEBACK)]
    for line, after in zip(heads, [*heads[1:], ""], strict=True):
        if line.startswith(_CHAINED):
            continue
        found = line.strip()
        if not after.startswith(_CHAINED):
            break
    return found


class QueryFailedError(JobError):
    """Raised when a streaming query terminates with an exception."""


class BatchFailedError(JobError):
    """Raised inside a micro-batch for a failure its writer explains (a broken expectation, a
    refused change of schema): nothing of the batch is written, and its ``reason`` reaches the
    run as the failed batch's outcome (:mod:`framework.microbatch`)."""

    def __init__(self, table: str, step: str, reason: str) -> None:
        super().__init__(table, step, reason)
        self.reason = reason


class SchemaChangeError(BatchFailedError):
    """Raised when a feed's file holds a column, or a value of a type, that its schema lacks,
    and its ``schema_evolution`` is ``failOnNewColumns``: nothing of the batch is written, and
    the next run reads it again from the start."""


class TableModeError(JobError):
    """Raised when a table's rows were written in another mode than its spec now asks (SCD type
    2 or not, with a change log or not): they cannot be carried on; the table must be rebuilt."""


class StorageError(MedallionError):
    """Raised when a file-system operation on the lake fails."""


class StorageAccessError(StorageError):
    """Raised when the lake refuses an operation to the identity used (HTTP 401/403)."""


class UsageError(MedallionError):
    """Raised when a command is asked something it cannot do as given (a table name that is
    not configured, SQL Spark rejects, a file that does not exist); exit code 2."""


class LakeInUseError(UsageError):
    """Raised when another command holds the lake's lease (:mod:`framework.lease`): says
    which run, on which host, since when; exit code 2."""


class OperationOpenError(UsageError):
    """Raised when a command would change tables while an operation that rewrites them (a
    refresh, a backfill) is still open in the lake's journal (:mod:`framework.journal`)."""


class ContractError(UsageError):
    """Raised when a data contract cannot be read, is not a valid ODCS document, or cannot be
    made from a spec or into one; exit code 2."""


class TableNotFoundError(UsageError):
    """Raised when a configured table is asked for but does not exist in the catalog."""


class QueryError(UsageError):
    """Raised when Spark rejects a query given on the command line (syntax, a table or column
    it cannot find); carries the first line of Spark's message."""


class ScanNotFoundError(MedallionError):
    """A query's plan has no scan of the table asked about."""
