"""Typed, frozen configuration: environments, table specs, and the tables they resolve to."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from pydantic import Field, PositiveInt, field_validator, model_validator

from framework.columns import Columns
from framework.config.checks import RunCheck, TableCheck
from framework.config.secrets import FORMS, SecretRef
from framework.config.types import AccountName, Identifier, Model, Text, interpolate
from framework.errors import SessionError
from framework.redaction import looks_secret

if TYPE_CHECKING:
    from framework.errors import ConfigError


class Layer(StrEnum):
    """The medallion layers, in the order data flows through them."""

    BRONZE = "bronze"
    SILVER = "silver"
    GOLD = "gold"


class Runtime(StrEnum):
    """Where the driver runs; decides how the SparkSession is obtained."""

    AUTO = "auto"  # Databricks if DATABRICKS_RUNTIME_VERSION is set, spark-submit if launched
    LOCAL = "local"  # by it, Spark Connect if SPARK_REMOTE is set, else local
    DATABRICKS = "databricks"
    SUBMIT = "submit"
    CONNECT = "connect"  # a Spark Connect server: `remote`, or $SPARK_REMOTE

    @classmethod
    def detect(cls, environ: Mapping[str, str] | None = None) -> Runtime:
        """Databricks if its runtime variable is set; spark-submit if it launched us; Spark
        Connect if ``$SPARK_REMOTE`` names a server; else local (``environ``: the process's)."""
        import os

        environ = os.environ if environ is None else environ
        if "DATABRICKS_RUNTIME_VERSION" in environ:
            return cls.DATABRICKS
        if "PYSPARK_GATEWAY_PORT" in environ:  # set by spark-submit's PythonRunner
            return cls.SUBMIT
        if environ.get("SPARK_REMOTE", "").startswith("sc://"):
            return cls.CONNECT
        return cls.LOCAL

    @staticmethod
    def databricks_connect(environ: Mapping[str, str] | None = None) -> bool:
        """Whether Databricks runs this process's Python as a Spark Connect client: serverless
        compute (its ``DATABRICKS_RUNTIME_VERSION`` is the serverless client's version,
        ``client.<major>.<minor>``, not a runtime's number) or a cluster in standard access mode
        (``SPARK_CONNECT_MODE_ENABLED``, pyspark's own mark of a Spark Connect process, read by
        ``pyspark.sql.utils.is_remote``). Once there is a session its own class decides
        (:func:`framework.jvm.is_connect`); this answers before: ``validate`` refuses a root a
        Connect client cannot reach, ``serve`` is refused at once."""
        import os

        environ = os.environ if environ is None else environ
        version = environ.get("DATABRICKS_RUNTIME_VERSION")
        if version is None:
            return False
        return version.startswith("client.") or "SPARK_CONNECT_MODE_ENABLED" in environ


class AzureAuthMethod(StrEnum):
    """How the framework and Spark authenticate to ADLS Gen2."""

    SERVICE_PRINCIPAL = "service_principal"
    MANAGED_IDENTITY = "managed_identity"
    WORKLOAD_IDENTITY = "workload_identity"
    DEFAULT = "default"  # DefaultAzureCredential: local development only
    ACCOUNT_KEY = "account_key"
    SAS = "sas"


class AzureStorage(Model):
    """Credentials for an ADLS Gen2 account; every secret is a reference."""

    account: AccountName
    auth: AzureAuthMethod
    tenant_id: Text | None = None
    client_id: Text | None = None
    client_secret: SecretRef | None = None
    account_key: SecretRef | None = None
    sas_token: SecretRef | None = None
    endpoint: Text | None = Field(
        default=None, description="The DFS endpoint, if not https://<account>.dfs.core."
        "windows.net (a private endpoint or sovereign cloud)")
    retries: int = Field(default=5, ge=0, le=20)
    retry_backoff_seconds: float = Field(default=2.0, ge=0, le=120)


class TransportType(StrEnum):
    """The transports of ``openlineage-python`` a lineage section may name."""

    CONSOLE = "console"
    FILE = "file"
    HTTP = "http"
    KAFKA = "kafka"


class Lineage(Model):
    """Where a run's OpenLineage events go (:mod:`framework.lineage`): ``transport`` is the
    client's own transport configuration (``type`` and its keys, as ``openlineage.yml`` spells
    them); a key holding a secret (an HTTP ``apiKey``, Kafka's ``sasl.password``) is a
    reference. ``spark_listener`` adds ``openlineage-spark`` to the sessions the framework
    starts, for Spark's plan-level events beside the framework's own."""

    transport: dict[str, Any]
    namespace: Identifier | None = Field(
        default=None, description="The jobs' namespace; default: the environment's name.")
    spark_listener: bool = False

    @field_validator("transport", mode="before")
    @classmethod
    def _typed_with_secret_references(cls, value: object) -> object:
        from pydantic_core import PydanticCustomError

        if not isinstance(value, dict):
            return value
        kind = value.get("type")
        valid = [t.value for t in TransportType]
        if kind not in valid:
            raise PydanticCustomError(
                "transport_type", "expected a transport type, one of {valid}, found {found}",
                {"valid": ", ".join(valid), "found": repr(kind)})
        return _secret_references(value, "transport")

    def transport_config(self) -> dict[str, Any]:
        """The transport's configuration with its secrets resolved (and registered with the
        log redactor), for the client; never logged."""
        return _resolved(self.transport)


def _secret_references(value: Any, path: str) -> Any:
    """``value`` with each secret-named key's value a :class:`SecretRef`; a literal there is
    refused (its value not shown)."""
    from pydantic_core import PydanticCustomError

    if not isinstance(value, dict):
        return interpolate(value)
    out: dict[str, Any] = {}
    for key, v in value.items():
        where = f"{path}.{key}"
        if looks_secret(str(key)) and not isinstance(v, dict):
            if not _is_reference(v) and not isinstance(v, SecretRef):
                raise PydanticCustomError(
                    "literal_secret",
                    "{key} holds a secret: expected a reference ({forms}), found a literal "
                    "value (not shown)", {"key": where, "forms": FORMS})
            out[key] = v if isinstance(v, SecretRef) else SecretRef(str(v).strip())
        else:
            out[key] = _secret_references(v, where)
    return out



def _resolved(value: Any) -> Any:
    if isinstance(value, SecretRef):
        return value.resolve()
    if isinstance(value, dict):
        return {k: _resolved(v) for k, v in value.items()}
    return value


class LayerSchemas(Model):
    """The catalog schema (database) of each layer, and of the operations tables (the run
    history, ``<ops>.runs``)."""

    bronze: Identifier = "bronze"
    silver: Identifier = "silver"
    gold: Identifier = "gold"
    ops: Identifier = "ops"

    def of(self, layer: Layer) -> str:
        return str(getattr(self, layer.value))


class Environment(Model):
    """One deployment target: where the lakehouse lives and how Spark is set up for it."""

    name: Identifier
    runtime: Runtime = Runtime.AUTO
    root: Text = Field(description="Lakehouse root: a local folder or an abfss:// URL.")
    catalog: Identifier = "spark_catalog"
    schemas: LayerSchemas = LayerSchemas()
    master: Text = "local[*]"
    remote: Text | None = Field(
        default=None,
        description="The Spark Connect server of a connect runtime (sc://host:port, with "
        "its parameters); default: $SPARK_REMOTE.")
    shuffle_partitions: PositiveInt = 4
    processing_interval: Text = "30 seconds"
    spark_conf: dict[str, Text | SecretRef] = Field(default_factory=dict)
    storage: AzureStorage | None = None
    metastore: Text | None = Field(
        default=None,
        description="The Hive metastore of a local or spark-submit runtime: a thrift:// URI of "
        "a metastore service, or an absolute folder for an embedded Derby database (one host). "
        "Default: <root>/metastore_db for a local root; the cluster's own setting otherwise.")
    lineage: Lineage | None = Field(
        default=None, description="OpenLineage events of every table run and refresh "
        "(framework.lineage); none when absent.")

    @field_validator("processing_interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        from framework.eventtime import check_interval

        return check_interval(value)

    def remote_url(self) -> str:
        """The Spark Connect server of a connect environment: ``remote``, else $SPARK_REMOTE."""
        import os

        url = self.remote or os.environ.get("SPARK_REMOTE", "")
        if not url.startswith("sc://"):
            raise SessionError(
                f"expected the Spark Connect server of environment {self.name!r} (remote: "
                "sc://host:port, or $SPARK_REMOTE), found " + (repr(url) if url else "neither"))
        return url

    @field_validator("remote")
    @classmethod
    def _remote_is_a_connect_url(cls, value: str | None) -> str | None:
        from pydantic_core import PydanticCustomError

        if value is None or value.startswith("sc://"):
            return value
        raise PydanticCustomError(
            "invalid_remote",
            "expected a Spark Connect URL (sc://host:port) for remote, found {found}",
            {"found": repr(value)},
        )

    @model_validator(mode="after")
    def _connect_needs_a_server_and_a_reachable_root(self) -> Environment:
        """A connect runtime names its server, and its root is a store the client reaches
        without a JVM (:func:`framework.storage.connect_refusal`); so is the root of a
        Databricks runtime that runs Python over Spark Connect (serverless compute, standard
        access mode: :meth:`Runtime.databricks_connect`)."""
        import os

        from pydantic_core import PydanticCustomError

        from framework.storage.base import JVM_FREE_SCHEMES, connect_refusal, scheme_of

        runtime = self.runtime if self.runtime is not Runtime.AUTO else Runtime.detect()
        on_databricks_connect = runtime is Runtime.DATABRICKS and Runtime.databricks_connect()
        if runtime is not Runtime.CONNECT and not on_databricks_connect:
            return self
        if self.runtime is Runtime.CONNECT and self.remote is None and \
                not os.environ.get("SPARK_REMOTE", "").startswith("sc://"):
            raise PydanticCustomError(
                "connect_without_server",
                "expected the Spark Connect server of runtime connect (remote: "
                "sc://host:port, or $SPARK_REMOTE), found neither")
        if scheme_of(self.root) not in JVM_FREE_SCHEMES:
            raise PydanticCustomError("connect_root", "{why}",
                                      {"why": connect_refusal(self.root)})
        return self

    @field_validator("metastore")
    @classmethod
    def _metastore_is_a_uri_or_an_absolute_folder(cls, value: str | None) -> str | None:
        from pydantic_core import PydanticCustomError

        if value is None or value.startswith("thrift://") or posixpath.isabs(value):
            return value
        raise PydanticCustomError(
            "invalid_metastore",
            "expected a thrift:// URI or an absolute folder for the metastore, found {found}",
            {"found": repr(value)},
        )

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _secret_conf_values_are_references(cls, value: object) -> object:
        # A key such as fs.azure.account.key.<acct>... holds a secret: keep it as a reference.
        if isinstance(value, dict):
            return {
                k: SecretRef(v) if looks_secret(str(k)) and _is_reference(v) else v
                for k, v in value.items()
            }
        return value

    @field_validator("spark_conf")
    @classmethod
    def _no_literal_secrets(
        cls, value: dict[str, str | SecretRef]
    ) -> dict[str, str | SecretRef]:
        from pydantic_core import PydanticCustomError

        for key, v in value.items():
            if looks_secret(key) and not isinstance(v, SecretRef):
                raise PydanticCustomError(
                    "literal_secret",
                    "spark_conf key {key} holds a secret: expected a reference ({forms}), "
                    "found a literal value (not shown)",
                    {"key": repr(key), "forms": FORMS},
                )
        return value

    def advise(self) -> list[str]:
        """Settings that are valid but probably not meant."""
        zone = self.spark_conf.get("spark.sql.session.timeZone")
        if zone is not None and str(zone).upper() not in {"UTC", "Z", "+00:00", "ETC/UTC"}:
            return [
                f"environment {self.name!r} sets spark.sql.session.timeZone to {str(zone)!r}: "
                "window_date and the event-time windows then follow that zone, not UTC"
            ]
        return []

    # ----------------------------------------------------------------- paths under the root
    def path(self, *parts: str) -> str:
        """A path under the lakehouse root (a local path or a URL, joined with '/')."""
        return posixpath.join(self.root.rstrip("/"), *parts)

    def table_name(self, layer: Layer, name: str) -> str:
        """The catalog name of the table ``name`` of ``layer`` (``catalog.schema.table``)."""
        return f"{self.catalog}.{self.schemas.of(layer)}.{name}"

    def resolve(self, path: str) -> str:
        """A configured path: absolute paths and URLs as given, relative ones under the root."""
        if path.startswith("/") or "://" in path:
            return path.rstrip("/")
        return self.path(path).rstrip("/")


def _is_reference(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        SecretRef(value.strip())
    except ValueError:
        return False
    return True


# The columns declared by the tables already seen, by (layer, short name).
Inputs = Mapping[tuple[Layer, str], Columns]


class SqlKind(StrEnum):
    """What a piece of SQL in a spec must parse as (see ``framework.sqlcheck``)."""

    SCHEMA = "schema"  # a DDL of columns: 'id BIGINT, name STRING'
    TYPE = "type"  # a data type: 'DECIMAL(10,2)'
    EXPRESSION = "expression"  # a column expression: 'sum(amount)', 'quantity > 0'


class SqlText(NamedTuple):
    """A piece of SQL in a spec, with its key path for error messages."""

    key: str
    kind: SqlKind
    text: str


class RuleKind(StrEnum):
    """What a row rule is: a row's own condition, or a table-level check judged per row."""

    EXPECTATION = "expectation"
    UNIQUE = "unique"
    REFERENCES = "references"


class RowRule(NamedTuple):
    """A rule of a table's rows: its name, kind, what it checks (SQL, or the key), its action,
    and the column it is about (if one)."""

    name: str
    kind: RuleKind
    content: str
    action: str
    column: str | None = None

    @property
    def enforced(self) -> bool:
        """Whether a row breaking it is kept out of the table (dropped, quarantined, held or
        failing its batch), not only counted (``warn``)."""
        return self.action != "warn"


class Stored(StrEnum):
    """How a table's rows are kept, as ``medallion status`` reads them without Spark."""

    DELTA = "delta"  # a Delta table at its location: its log says version and rows
    PARQUET = "parquet"  # a (Hive-bucketed) parquet table at its location: its files' footers
    VIEW = "view"  # a view in the catalog: no rows of its own, a query counts them


class RebuildMethod(StrEnum):
    """How ``medallion refresh`` rebuilds a table from its sources."""

    # its query's checkpoint set aside and its tables emptied: the query rereads its source
    # from the start, with state from zero
    STREAM = "stream"
    # its table emptied and its build-state property removed: the next build is a whole one
    WHOLE = "whole"
    # its tables emptied, its checkpoint kept: its job rereads its inputs batch by batch (a
    # file feed's files, from the archive), as its layer's ``reread`` says
    REREAD = "reread"


@dataclass(frozen=True)
class Rebuild:
    """What a refresh resets for a table: the Delta tables it writes (its own location first,
    then its companions: quarantine, change log), its checkpoint, and the table properties that
    record what its rows were built from."""

    method: RebuildMethod
    locations: tuple[str, ...]
    checkpoint: str | None = None
    properties: tuple[str, ...] = ()


class TableSpec(Model):
    """What every table spec has; each layer's spec extends it (see ``framework.layers``). The
    hooks below return nothing unless they say otherwise."""

    layer: ClassVar[Layer]

    name: Identifier
    description: str = ""

    def check(self, table: Table) -> list[ConfigError]:
        """Checks that need the environment (paths, other tables)."""
        return []

    def backlog_path(self, table: Table) -> str | None:
        """A folder whose files wait for this table (bronze's landing zone)."""
        return None

    def external_sources(self) -> list[tuple[str, str]]:
        """The datasets outside the lake the table reads, named as OpenLineage names them
        (namespace, name): a feed's topics; none by default."""
        return []

    def stored(self) -> Stored:
        """How the table keeps its rows; a Delta table by default."""
        return Stored.DELTA

    def folders(self, table: Table) -> list[str]:
        """Folders the table's jobs use besides its location and checkpoint (a feed's landing
        zone), which ``medallion init`` creates."""
        return []

    def upstream(self) -> list[tuple[Layer, str]]:
        """The configured tables this one reads (layer, short name)."""
        return []

    def sql_texts(self) -> list[SqlText]:
        """The spec's SQL (schemas, types, expressions), for Spark's parser to check in
        ``medallion validate``."""
        return []

    def declared_columns(self, table: Table, inputs: Inputs) -> Columns | None:
        """The table's columns as its spec declares them, from those of the tables it reads
        (``inputs``: the ones known); None when they cannot be known without data
        (:mod:`framework.columns`)."""
        return None

    def column_problems(self, table: Table, inputs: Inputs) -> list[ConfigError]:
        """Each key naming a column of a table it reads (among ``inputs``) that the table does
        not declare, or whose type cannot serve (an event time that is no timestamp)."""
        return []

    def advise(self, table: Table, project: ProjectConfig) -> list[str]:
        """Warnings about a valid configuration that will not do what it is likely meant to (a
        join that cannot prune, say), shown by ``medallion validate``."""
        return []

    def run_checks(self) -> list[RunCheck]:
        """The checks of the table as a run leaves it (freshness, volume), evaluated at the end
        of each run (:mod:`framework.quality`); none by default."""
        return []

    def table_checks(self) -> list[TableCheck]:
        """Every table-level check of the spec (``checks:``), those judged per batch too; by
        default those of the run (:meth:`run_checks`)."""
        return list(self.run_checks())

    def column_comments(self) -> dict[str, str]:
        """A description of some columns, by name (what the catalog shows as their comment);
        none by default."""
        return {}

    def column_expressions(self) -> dict[str, str]:
        """The SQL expression of each column the table computes, by name; none by default."""
        return {}

    @property
    def holds(self) -> bool:
        """Whether rows of the table can wait in ``<table>_held`` for a key another table
        lacks (a ``references`` check with action ``hold``); no by default."""
        return False

    def event_time_column(self) -> str | None:
        """The column holding each row's event time, if the table has one."""
        return None

    def row_keys(self) -> list[str]:
        """The columns that identify one row of the table, by which ``medallion test`` pairs
        an expected row with the row found (:mod:`framework.spectest`); none by default: rows
        are compared whole."""
        return []

    def rebuild(self, table: Table) -> Rebuild | None:
        """How ``medallion refresh`` rebuilds the table (None: a view, with no rows of its
        own); by default its stream's checkpoint and its own table are reset."""
        return Rebuild(RebuildMethod.STREAM, (table.location,), table.checkpoint)

    def rebuild_refusal(self, table: Table) -> str | None:
        """Why ``medallion refresh`` cannot rebuild the table (None: it can)."""
        return None

    def column_origins(self) -> dict[str, str] | None:
        """Each column the table writes, with the Spark SQL expression over the table it reads
        (its first upstream) that computes it: a column taken as is gives its input column's
        name. None when the spec does not say (its input's columns pass through, or code may
        change them); the column lineage of :mod:`framework.lineage`."""
        return None

    def row_rules(self) -> list[RowRule]:
        """The rules the table's rows are checked against as they are written (expectations,
        batch checks), whose broken rows a run counts as ``rule:<name>``; none by default."""
        return []

    def stale_parts(self) -> dict[str, str]:
        """The parts of the spec deciding the content of rows already written (a column's
        expression, a rule that drops rows, a window), by name with their values as text; a
        change to one leaves rows only a refresh recomputes (:mod:`framework.staleness`).
        Layout and descriptions are not among them."""
        return {}


@dataclass(frozen=True)
class Table:
    """A table spec bound to an environment: its catalog name and its storage locations."""

    spec: TableSpec
    layer: Layer
    env: Environment
    source_file: str

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def schema(self) -> str:
        return self.env.schemas.of(self.layer)

    @property
    def full_name(self) -> str:
        """``catalog.schema.table``; every part is a validated identifier, safe in SQL text."""
        return self.env.table_name(self.layer, self.spec.name)

    def qualified(self, suffix: str) -> str:
        """The full name of a companion table (``orders`` -> ``orders_quarantine``)."""
        return f"{self.full_name}_{suffix}"

    @property
    def location(self) -> str:
        return self.env.path("tables", self.layer.value, self.spec.name)

    def companion_location(self, suffix: str) -> str:
        return self.env.path("tables", self.layer.value, f"{self.spec.name}_{suffix}")

    @property
    def checkpoint(self) -> str:
        """This table's own checkpoint folder; never shared with another query."""
        return self.env.path("_checkpoints", self.layer.value, self.spec.name)


@dataclass(frozen=True)
class ProjectConfig:
    """Everything ``conf/`` holds for one environment: the environment and its tables."""

    env: Environment
    tables: tuple[Table, ...]
    conf_dir: str

    def table(self, name: str, layer: Layer | None = None) -> Table:
        """A table by its short name (``orders``) or full name; raises if absent or ambiguous."""
        from framework.errors import TableNotFoundError

        hits = [
            t
            for t in self.tables
            if (layer is None or t.layer == layer) and name in (t.name, t.full_name)
        ]
        if len(hits) != 1:
            known = ", ".join(sorted(t.full_name for t in self.tables)) or "none"
            what = "no table" if not hits else f"{len(hits)} tables"
            raise TableNotFoundError(
                f"expected one configured table named {name!r}"
                f"{f' in layer {layer.value}' if layer else ''}, found {what}; known: {known}"
            )
        return hits[0]

    def of_layer(self, layer: Layer) -> tuple[Table, ...]:
        return tuple(t for t in self.tables if t.layer == layer)

    def in_flow_order(self, tables: Iterable[Table]) -> list[Table]:
        """``tables`` in the order data flows: by layer, and within a layer after the tables
        they read (a gold mart after its fact)."""
        order = list(Layer)
        return sorted(tables, key=lambda t: (order.index(t.layer), self._depth(t), t.name))

    def fed_by(self, tables: Iterable[Table]) -> list[Table]:
        """``tables`` and every table reading one of them, directly or not, in flow order."""
        reached = {(t.layer, t.name) for t in tables}
        fed = []
        for table in self.in_flow_order(self.tables):
            if (table.layer, table.name) in reached or \
                    any(up in reached for up in table.spec.upstream()):
                reached.add((table.layer, table.name))
                fed.append(table)
        return fed

    def _depth(self, table: Table, seen: frozenset[str] = frozenset()) -> int:
        """How many tables of its own layer ``table`` reads through, one after another."""
        known = {t.name for t in self.tables if t.layer == table.layer}
        same = [name for layer, name in table.spec.upstream()  # (validate: some may be absent)
                if layer == table.layer and name not in seen and name in known]
        return max((1 + self._depth(self.table(name, table.layer), seen | {table.name})
                    for name in same), default=0)
