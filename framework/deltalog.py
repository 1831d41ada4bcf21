"""A Delta table's state as its log says it, without a JVM: version, last commit, rows.

``medallion status`` reads this for every table of a lake on a local disk or on ADLS, answering
in a second or two instead of starting Spark (a JVM, Delta, the catalog) for what the log
already holds. The log is read by ``deltalake`` (delta-rs), a maintained reader of the Delta
protocol, not parsed here: it replays checkpoints and commits the way Delta does, and reaches
ADLS through its own object store with the environment's credentials.

Rows are the sum of the ``numRecords`` statistic Delta writes with each of the table's live
files (Spark's count of a Delta table answers from the same statistics). A file written without
statistics (``spark.databricks.delta.stats.collect=false``) leaves the count unknown (None),
never smaller (``DeltaTable.count()`` would skip such files: a smaller number); a file with a
deletion vector counts its rows less those the vector deletes. A table whose columns are not
indexed for skipping (``delta.dataSkippingNumIndexedCols = 0``) still has its row counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from framework.config.model import AzureAuthMethod, Environment
from framework.errors import StorageError, first_line
from framework.storage.base import local_path, scheme_of

if TYPE_CHECKING:
    from deltalake import DeltaTable

ADLS_SCHEMES = ("abfss", "abfs")


@dataclass(frozen=True)
class LogState:
    """What a Delta table's log says of it now."""

    version: int
    last_commit: datetime | None  # naive, the local time (as Spark's DESCRIBE HISTORY gives it)
    rows: int | None  # None: a live file's log entry holds no row count


def readable(env: Environment) -> bool:
    """Whether the logs of the tables under ``env``'s root can be read here without Spark: a
    root on a local disk, or on ADLS with the environment's ``storage`` settings (the account
    and its credentials). Another scheme (``hdfs://``, ``dbfs:/``, ``s3a://``), or ADLS with
    the cluster's own credentials, needs Spark's file system."""
    scheme = scheme_of(env.root)
    return scheme in ("", "file") or (scheme in ADLS_SCHEMES and env.storage is not None)


def read_state(location: str, env: Environment) -> LogState | None:
    """The state of the Delta table at ``location``; None when there is none (no
    ``_delta_log``). A log that cannot be read (refused, unreachable, a protocol feature the
    reader does not know) is a :class:`StorageError` naming the location."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    uri, options = table_uri(location, env)
    if not scheme_of(uri) and not _has_log(uri):
        return None  # (a local folder: one stat, not the reader's error path)
    try:
        table = DeltaTable(uri, storage_options=options or None)
        history = table.history(1)
        stamp = history[0].get("timestamp") if history else None
        last_commit = datetime.fromtimestamp(stamp / 1000) if stamp is not None else None
        return LogState(table.version(), last_commit, _rows(table))
    except TableNotFoundError:
        return None
    except (DeltaError, OSError) as exc:
        raise StorageError(f"expected to read the Delta log of the table at {location}, "
                           f"found: {first_line(exc)}") from exc


def log_version(location: str, env: Environment) -> int | None:
    """The current version of the Delta table at ``location`` (None: no table there)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    uri, options = table_uri(location, env)
    if not scheme_of(uri) and not _has_log(uri):
        return None
    try:
        return DeltaTable(uri, storage_options=options or None).version()
    except TableNotFoundError:
        return None
    except (DeltaError, OSError) as exc:
        raise StorageError(f"expected to read the Delta log of the table at {location}, "
                           f"found: {first_line(exc)}") from exc


def table_uri(location: str, env: Environment) -> tuple[str, dict[str, str]]:
    """The URI ``deltalake`` opens for ``location`` and its storage options."""
    scheme = scheme_of(location)
    if scheme in ("", "file"):
        return local_path(location), {}
    if scheme in ADLS_SCHEMES:
        return location, storage_options(env)
    raise ValueError(f"expected a local or ADLS location, found {location!r}")


def storage_options(env: Environment) -> dict[str, str]:
    """``deltalake``'s options (object_store's Azure keys) for the environment's ADLS account,
    from its ``storage`` settings, secrets resolved here, at the moment of use."""
    from framework.storage.adls import resolve_access

    settings = env.storage
    if settings is None:
        return {}
    a = resolve_access(settings)
    options = {"azure_storage_account_name": a.account}
    if a.auth is AzureAuthMethod.ACCOUNT_KEY:
        options["azure_storage_account_key"] = a.secret
    elif a.auth is AzureAuthMethod.SAS:
        options["azure_storage_sas_key"] = a.secret
    elif a.auth is AzureAuthMethod.SERVICE_PRINCIPAL:
        options.update({"azure_storage_client_id": a.client_id,
                        "azure_storage_tenant_id": a.tenant_id,
                        "azure_storage_client_secret": a.secret})
    elif a.auth is AzureAuthMethod.WORKLOAD_IDENTITY:
        options.update({"azure_storage_client_id": a.client_id,
                        "azure_storage_tenant_id": a.tenant_id,
                        "azure_federated_token_file": a.token_file})
    elif a.auth is AzureAuthMethod.MANAGED_IDENTITY:
        # object_store asks the instance metadata endpoint when no other credential is given
        if a.client_id:
            options["azure_storage_client_id"] = a.client_id
    elif a.auth is AzureAuthMethod.DEFAULT:
        options["azure_use_azure_cli"] = "true"
    if settings.endpoint:
        options["azure_storage_endpoint"] = settings.endpoint.rstrip("/")
        if settings.endpoint.startswith("http://"):
            options["allow_http"] = "true"
    options["max_retries"] = str(settings.retries)
    return options


def _has_log(folder: str) -> bool:
    import os

    return os.path.isdir(os.path.join(folder, "_delta_log"))


def _rows(table: DeltaTable) -> int | None:
    """The rows of the live files, from their statistics; None when one file has none."""
    actions: Any = table.get_add_actions(flatten=True)
    records = actions.column("num_records").to_pylist()
    if any(n is None for n in records):
        return None
    return sum(int(n) for n in records) - _deleted(table)


def _deleted(table: DeltaTable) -> int:
    """The rows the live files' deletion vectors delete (counted in the add actions'
    ``numRecords``), read only for a table whose protocol allows deletion vectors."""
    if "deletionVectors" not in (table.protocol().reader_features or []):
        return 0
    vectors: Any = table.deletion_vectors().read_all()
    return sum(keep.count(False) for keep in vectors.column("selection_vector").to_pylist())


def query(location: str, env: Environment, sql: str) -> list[dict[str, Any]] | None:
    """The rows of ``sql`` over the Delta table at ``location`` (named ``t`` in it), read by
    delta-rs's SQL engine (DataFusion) without a JVM; None when there is no table there."""
    from deltalake import DeltaTable, QueryBuilder
    from deltalake.exceptions import DeltaError, TableNotFoundError

    uri, options = table_uri(location, env)
    if not scheme_of(uri) and not _has_log(uri):
        return None
    try:
        table = DeltaTable(uri, storage_options=options or None)
        result = QueryBuilder().register("t", table).execute(sql).read_all()
    except TableNotFoundError:
        return None
    except (DeltaError, OSError) as exc:
        raise StorageError(f"expected to read the Delta table at {location}, found: "
                           f"{first_line(exc)}") from exc
    columns = {name: result.column(name).to_pylist() for name in result.column_names}
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(),
                                                                       strict=True)]
