"""OpenLineage run events of every table run and refresh, through the official client.

An environment with a ``lineage:`` section (:class:`~framework.config.model.Lineage`) sends, for
each table's run (:meth:`framework.job.Job.run`), a ``START`` event as it begins and one of
``COMPLETE``, ``FAIL`` or ``ABORT`` (stopped on request, or by a signal) as it ends; a refresh
(:mod:`framework.refresh`) sends its own, and its tables' runs name it as their parent. Without
the section nothing is built or sent.

An event names:

- the run (a new UUID per table run) and its parent: the ``medallion run`` or the refresh that
  ran the table (a UUID derived from the framework's run id, or the refresh's operation);
- the job: the environment's namespace (``lineage.namespace``, default the environment's name)
  and the table's catalog name;
- the datasets it reads (the tables of ``upstream()``, a feed's landing folder) and writes (the
  table), each named by its storage location (namespace ``file`` for a local path, the URL's
  scheme and authority otherwise) with its catalog name as a symlink, and its schema, data
  source and catalog;
- on the end event: the column lineage (each column the spec computes and the input columns its
  expression reads, parsed by sqlglot, without a JVM), the output statistics (rows written,
  bytes and files the run's commits added), the row rules (expectations, unique and references
  checks) as assertions on the input with the rows breaking each, the run-level checks
  (freshness, volume) as assertions on the output, and the error message of a failed run.

A transport that fails never fails the run: the error is logged (``lineage.emit_failed``, the
transport's secrets masked) and counted (``lineage_emit_failed`` among the run's counts).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from framework.errors import MedallionError, first_line
from framework.redaction import redact
from framework.storage.base import scheme_of

if TYPE_CHECKING:
    from openlineage.client import OpenLineageClient
    from openlineage.client.event_v2 import InputDataset, OutputDataset, RunEvent
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from framework.config.model import Environment, Lineage, RowRule, Table
    from framework.quality import CheckResult

INTEGRATION = "MEDALLION"
PRODUCER = "https://github.com/medallion-lakehouse/medallion-lakehouse"
# The namespace of the parent runs' UUIDs (a `medallion run`, a refresh): derived, so every
# table of one run names the same parent
PARENT_NAMESPACE = uuid.UUID("6f1c1f55-8d0c-4a8e-9b1c-5d3c0b7a2e41")
CLOSE_SECONDS = 10.0
EMIT_FAILED = "lineage_emit_failed"


class LineageError(MedallionError):
    """Raised when the environment's lineage transport cannot be built from its configuration
    (an unknown key of the transport, a missing package)."""


# ---------------------------------------------------------------------- column lineage
def columns_read(expression: str) -> list[str]:
    """The columns a Spark SQL expression reads, in the order they first appear (parsed by
    sqlglot's Spark dialect); a :class:`LineageError` for text that does not parse."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(expression, dialect="spark")
    except sqlglot.errors.ParseError as exc:
        raise LineageError(f"expected a Spark SQL expression, found {expression!r}: "
                           f"{first_line(exc)}") from exc
    names = [node.name for node in tree.walk(bfs=False)
             if isinstance(node, exp.Column) and node.name]
    return list(dict.fromkeys(names))


def column_lineage(origins: Mapping[str, str]) -> dict[str, list[str]]:
    """Each output column and the input columns its expression reads (:func:`columns_read`); a
    column whose expression does not parse is left out."""
    found = {}
    for column, expression in origins.items():
        try:
            found[column] = columns_read(expression)
        except LineageError:
            continue
    return found


# ---------------------------------------------------------------------- datasets
def dataset_name(location: str) -> tuple[str, str]:
    """The OpenLineage (namespace, name) of a storage location: ``file`` and the path for a
    local one, the scheme and authority (``hdfs://namenode:8020``,
    ``abfss://container@account.dfs.core.windows.net``) and the path for a URL."""
    scheme = scheme_of(location)
    if scheme in ("", "file"):
        path = location.removeprefix("file://").removeprefix("file:")
        return "file", path
    rest = location.split("://", 1)[1] if "://" in location else location.split(":", 1)[1]
    authority, _, path = rest.partition("/")
    return f"{scheme}://{authority}", "/" + path


def run_parent_id(env: Environment, run_id: str) -> str:
    """The UUID of a ``medallion run`` (the parent of its tables' runs)."""
    return str(uuid.uuid5(PARENT_NAMESPACE, f"{env.name}/run/{run_id}"))


def refresh_run_id(env: Environment, op: str) -> str:
    """The UUID of a refresh (the parent of its tables' rebuilds)."""
    return str(uuid.uuid5(PARENT_NAMESPACE, f"{env.name}/refresh/{op}"))


def namespace_of(env: Environment) -> str:
    """The jobs' namespace: ``lineage.namespace``, default the environment's name."""
    lineage = env.lineage
    return (lineage.namespace if lineage is not None and lineage.namespace else None) \
        or env.name


def client_for(lineage: Lineage) -> OpenLineageClient:
    """An OpenLineage client whose transport is the environment's (its secrets resolved)."""
    from openlineage.client import OpenLineageClient
    from openlineage.client.transport import get_default_factory

    config = lineage.transport_config()
    try:
        transport = get_default_factory().create(dict(config))
        # config: the client reads no openlineage.yml nor OPENLINEAGE_* variables of its own
        return OpenLineageClient(transport=transport, config={"transport": config})
    except Exception as exc:
        raise LineageError(
            f"expected a {lineage.transport.get('type')} transport the OpenLineage client "
            f"can build from the environment's lineage.transport, found an error: "
            f"{redact(first_line(exc))}") from exc


class Emitter:
    """Sends one run's events through its client, never raising: a failure is logged as
    ``lineage.emit_failed`` and counted in :attr:`failures`."""

    def __init__(self, lineage: Lineage, log: Any) -> None:
        self.log = log
        self.failures = 0
        self.kind = str(lineage.transport.get("type"))
        self.client: OpenLineageClient | None
        try:
            self.client = client_for(lineage)
        except LineageError as exc:
            self.client = None
            self.failed("client", exc)

    def emit(self, event: RunEvent) -> bool:
        """Send ``event``; whether it went."""
        if self.client is None:
            self.failures += 1
            return False
        try:
            self.client.emit(event)
        except Exception as exc:
            self.failed(str(event.eventType.value if event.eventType else ""), exc)
            return False
        return True

    def close(self) -> None:
        """Let the transport deliver what it holds (Kafka's producer), then let it go."""
        if self.client is None:
            return
        try:
            self.client.close(CLOSE_SECONDS)
        except Exception as exc:
            self.failed("close", exc)

    def failed(self, what: str, exc: BaseException) -> None:
        """Log and count a failure to build or send ``what`` (an event's type)."""
        self.failures += 1
        self.log.warning("lineage.emit_failed", event_type=what, transport=self.kind,
                         error=redact(f"{type(exc).__name__}: {first_line(exc)}"),
                         failures=self.failures)


# ---------------------------------------------------------------------- facets
def _now() -> str:
    return datetime.now(UTC).isoformat()


def _schema_facet(schema: StructType | None) -> Any:
    from openlineage.client.facet_v2 import schema_dataset

    if schema is None:
        return None
    return schema_dataset.SchemaDatasetFacet(fields=[
        schema_dataset.SchemaDatasetFacetFields(name=f.name, type=f.dataType.simpleString(),
                                                ordinal_position=i)
        for i, f in enumerate(schema.fields, start=1)])


def _table_facets(env: Environment, location: str, catalog_name: str | None,
                  schema: StructType | None) -> dict[str, Any]:
    from openlineage.client.facet_v2 import catalog_dataset, datasource_dataset, symlinks_dataset

    namespace, _ = dataset_name(location)
    facets: dict[str, Any] = {
        "dataSource": datasource_dataset.DatasourceDatasetFacet(
            name=namespace, uri=namespace if "://" in namespace else "file:///"),
    }
    if catalog_name is not None:
        facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(identifiers=[
            symlinks_dataset.Identifier(namespace=f"{namespace_of(env)}.catalog",
                                        name=catalog_name, type="TABLE")])
        facets["catalog"] = catalog_dataset.CatalogDatasetFacet(
            framework="delta", type="hive", name=env.catalog, warehouseUri=env.root,
            source="spark")
    schema_facet = _schema_facet(schema)
    if schema_facet is not None:
        facets["schema"] = schema_facet
    return facets


def _assertions(rules: Sequence[RowRule], counts: Mapping[str, int]) -> Any:
    from openlineage.client.facet_v2 import data_quality_assertions_dataset as dq

    return dq.DataQualityAssertionsDatasetFacet(assertions=[
        dq.Assertion(assertion=r.kind, success=counts.get(f"rule:{r.name}", 0) == 0,
                     column=r.column, severity=r.action, name=r.name, expected="0",
                     actual=str(counts.get(f"rule:{r.name}", 0)), content=r.content,
                     contentType="sql" if r.kind == "expectation" else "expression")
        for r in rules])


def _check_assertions(results: Sequence[CheckResult]) -> Any:
    from openlineage.client.facet_v2 import data_quality_assertions_dataset as dq

    return dq.DataQualityAssertionsDatasetFacet(assertions=[
        dq.Assertion(assertion=r.kind.value, success=r.passed, severity=r.action.value,
                     name=r.check, expected=r.threshold, actual=r.observed)
        for r in results])


# ---------------------------------------------------------------------- a table's run
class TableLineage:
    """The events of one table's run: :meth:`started` as it begins, :meth:`ended` once it has
    its summary. Reads what it reports (schemas, the commits of the run) from the tables with
    public Spark and Delta APIs, classic or Connect alike; a failure to read one leaves that
    facet out."""

    def __init__(self, spark: SparkSession, table: Table, run_id: str,
                 operation: str | None, continuous: bool, log: Any) -> None:
        assert table.env.lineage is not None
        self.spark = spark
        self.table = table
        self.env = table.env
        self.log = log
        self.emitter = Emitter(table.env.lineage, log)
        self.run_uuid = str(_new_uuid())
        self.parent = (refresh_run_id(self.env, operation), "refresh") if operation \
            else (run_parent_id(self.env, run_id), "run")
        self.continuous = continuous
        self.version_at_start: int | None = None
        self.reads = True  # whether the tables are read for schemas and statistics
        self.input_schemas: dict[str, StructType | None] = {}

    @classmethod
    def open(cls, spark: SparkSession, table: Table, run_id: str, operation: str | None,
             continuous: bool, log: Any) -> TableLineage | None:
        """The run's lineage, or None when the environment sends none."""
        if table.env.lineage is None:
            return None
        return cls(spark, table, run_id, operation, continuous, log)

    @property
    def failures(self) -> int:
        return self.emitter.failures

    # ------------------------------------------------------------------ events
    def started(self) -> None:
        from openlineage.client.event_v2 import RunState

        try:
            self.version_at_start = self._version()
            inputs, outputs = self._inputs(), [self._output()]
        except Exception as exc:  # (a dataset the client refuses: counted, never raised)
            self.emitter.failed("START", exc)
            return
        self._send(RunState.START, inputs, outputs)

    def ended(self, status: str, *, error: str | None, rows_in: int, rows_out: int,
              counts: Mapping[str, int], checks: Sequence[CheckResult] = (),
              interrupted: bool = False) -> None:
        """The end event of a run that ended as ``status`` (a :class:`RunStatus` value):
        COMPLETE for succeeded, ABORT for stopped, FAIL for failed. ``interrupted``: a second
        signal ended it, and the tables are not read again (the session may be gone)."""
        from openlineage.client.event_v2 import RunState

        self.reads = not interrupted
        state = {"succeeded": RunState.COMPLETE, "stopped": RunState.ABORT}.get(
            status, RunState.FAIL)
        try:
            inputs = self._inputs(rows_in=rows_in, counts=counts)
            outputs = [self._output(rows_out=rows_out, checks=checks, end=True)]
        except Exception as exc:
            self.emitter.failed(str(state.value), exc)
        else:
            self._send(state, inputs, outputs, error=error)
        self.emitter.close()

    def _send(self, state: Any, inputs: list[InputDataset], outputs: list[OutputDataset],
              error: str | None = None) -> None:
        from openlineage.client.event_v2 import Job, Run, RunEvent

        try:
            event = RunEvent(eventType=state, eventTime=_now(), producer=PRODUCER,
                             run=Run(runId=self.run_uuid, facets=self._run_facets(error)),
                             job=Job(namespace=namespace_of(self.env),
                                     name=self.table.full_name, facets=self._job_facets()),
                             inputs=inputs, outputs=outputs)
        except Exception as exc:  # (a facet the client refuses: counted, never raised)
            self.emitter.failed(str(state.value), exc)
            return
        if self.emitter.emit(event):
            self.log.debug("lineage.emitted", event_type=state.value, run_uuid=self.run_uuid)

    # ------------------------------------------------------------------ facets
    def _run_facets(self, error: str | None) -> dict[str, Any]:
        from openlineage.client.facet_v2 import error_message_run, parent_run, processing_engine_run

        from framework import __version__

        parent_id, parent_job = self.parent
        facets: dict[str, Any] = {
            "parent": parent_run.ParentRunFacet(
                run=parent_run.Run(runId=parent_id),
                job=parent_run.Job(namespace=namespace_of(self.env), name=parent_job)),
            "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
                version=self._spark_version(), name="spark",
                openlineageAdapterVersion=__version__),
        }
        if error is not None:
            facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=redact(error), programmingLanguage="python")
        return facets

    def _job_facets(self) -> dict[str, Any]:
        from openlineage.client.facet_v2 import documentation_job, job_type_job

        facets: dict[str, Any] = {"jobType": job_type_job.JobTypeJobFacet(
            processingType="STREAMING" if self.continuous else "BATCH",
            integration=INTEGRATION, jobType=f"{self.table.layer.value.upper()}_TABLE")}
        if self.table.spec.description:
            facets["documentation"] = documentation_job.DocumentationJobFacet(
                description=self.table.spec.description)
        return facets

    def _sources(self) -> list[tuple[str, str | None]]:
        """(location, catalog name or None) of each dataset the table reads."""
        found: list[tuple[str, str | None]] = []
        for layer, name in self.table.spec.upstream():
            found.append((self.env.path("tables", layer.value, name),
                          self.env.table_name(layer, name)))
        backlog = self.table.spec.backlog_path(self.table)
        if backlog is not None:
            found.append((backlog, None))
        return found

    def _inputs(self, rows_in: int | None = None,
                counts: Mapping[str, int] | None = None) -> list[InputDataset]:
        from openlineage.client.event_v2 import InputDataset
        from openlineage.client.facet_v2 import data_quality_metrics_input_dataset as dqm

        inputs = []
        rules = self.table.spec.row_rules()
        for i, (location, catalog_name) in enumerate(self._sources()):
            namespace, name = dataset_name(location)
            if catalog_name is not None and location not in self.input_schemas:
                self.input_schemas[location] = self._schema(location)  # (read once a run)
            schema = self.input_schemas.get(location)
            input_facets: dict[str, Any] = {}
            if i == 0 and counts is not None:  # (the rows checked are the first input's)
                if rules:
                    input_facets["dataQualityAssertions"] = _assertions(rules, counts)
                input_facets["dataQualityMetrics"] = \
                    dqm.DataQualityMetricsInputDatasetFacet(rowCount=rows_in, columnMetrics={})
            inputs.append(InputDataset(
                namespace=namespace, name=name,
                facets=_table_facets(self.env, location, catalog_name, schema),
                inputFacets=input_facets))
        for namespace, name in self.table.spec.external_sources():  # (a feed's topics)
            inputs.append(InputDataset(namespace=namespace, name=name))
        return inputs

    def _output(self, rows_out: int | None = None, checks: Sequence[CheckResult] = (),
                end: bool = False) -> OutputDataset:
        from openlineage.client.event_v2 import OutputDataset
        from openlineage.client.facet_v2 import output_statistics_output_dataset as stats

        location = self.table.location
        namespace, name = dataset_name(location)
        facets = _table_facets(self.env, location, self.table.full_name, self._schema(location))
        output_facets: dict[str, Any] = {}
        if end:
            lineage = self._column_lineage()
            if lineage is not None:
                facets["columnLineage"] = lineage
            if checks:
                facets["dataQualityAssertions"] = _check_assertions(checks)
            size, files = self._written()
            output_facets["outputStatistics"] = stats.OutputStatisticsOutputDatasetFacet(
                rowCount=rows_out, size=size, fileCount=files)
        return OutputDataset(namespace=namespace, name=name, facets=facets,
                             outputFacets=output_facets)

    def _column_lineage(self) -> Any:
        from openlineage.client.facet_v2 import column_lineage_dataset as cl

        origins = self.table.spec.column_origins()
        upstream = self.table.spec.upstream()
        if origins is None or not upstream:
            return None
        layer, source = upstream[0]
        namespace, name = dataset_name(self.env.path("tables", layer.value, source))
        fields = {}
        reads = column_lineage(origins)
        for column, read in reads.items():
            identity = len(read) == 1 and origins[column].strip().strip("`") == read[0]
            fields[column] = cl.Fields(
                inputFields=[cl.InputField(
                    namespace=namespace, name=name, field=c,
                    transformations=[cl.Transformation(
                        type="DIRECT", subtype="IDENTITY" if identity else "TRANSFORMATION",
                        description=None if identity else origins[column])])
                    for c in read],
                transformationDescription=None if identity else origins[column],
                transformationType="IDENTITY" if identity else "TRANSFORMATION")
        # the rules that keep rows out read their columns (the table's: so the input's its
        # expressions read) for the whole dataset
        filtered = [read for r in self.table.spec.row_rules()
                    if r.kind == "expectation" and r.action != "warn"
                    for c in _safe_columns(r.content) for read in reads.get(c, [c])]
        dataset = [cl.InputField(namespace=namespace, name=name, field=c,
                                 transformations=[cl.Transformation(type="INDIRECT",
                                                                    subtype="FILTER")])
                   for c in dict.fromkeys(filtered)]
        return cl.ColumnLineageDatasetFacet(fields=fields, dataset=dataset)

    # ------------------------------------------------------------------ reading the tables
    def _spark_version(self) -> str:
        try:
            return str(self.spark.version)
        except Exception:
            return "unknown"

    def _schema(self, location: str) -> StructType | None:
        from framework.delta import is_delta_table, read_table

        if not self.reads:
            return None
        try:
            if not is_delta_table(self.spark, location):
                return None
            return read_table(self.spark, location).schema
        except Exception as exc:
            self.log.debug("lineage.schema.unread", location=location, error=first_line(exc))
            return None

    def _version(self) -> int | None:
        from framework.delta import is_delta_table, latest_commit

        try:
            if not is_delta_table(self.spark, self.table.location):
                return None
            commit = latest_commit(self.spark, self.table.location)
            return commit.version if commit is not None else None
        except Exception:
            return None

    def _written(self) -> tuple[int | None, int | None]:
        """The bytes and files the run's commits to the table added (Delta's operation
        metrics of the commits after the version it started at)."""
        from framework.delta import history, is_delta_table

        if not self.reads:
            return None, None
        try:
            if not is_delta_table(self.spark, self.table.location):
                return None, None
            after = -1 if self.version_at_start is None else self.version_at_start
            rows = history(self.spark, self.table.location).where(f"version > {after}") \
                .select("operationMetrics").collect()
        except Exception as exc:
            self.log.debug("lineage.history.unread", error=first_line(exc))
            return None, None
        return _added(r["operationMetrics"] or {} for r in rows)


def _added(metrics: Iterable[Mapping[str, str]]) -> tuple[int, int]:
    """Bytes and files added by commits with these operation metrics (a write's
    ``numOutputBytes``/``numFiles``, a MERGE's ``numTargetBytesAdded``/``numTargetFilesAdded``)."""
    size = files = 0
    for m in metrics:
        size += int(m.get("numOutputBytes", m.get("numTargetBytesAdded", "0")) or 0)
        files += int(m.get("numFiles", m.get("numTargetFilesAdded", m.get("numAddedFiles", "0")))
                     or 0)
    return size, files


def _safe_columns(expression: str) -> list[str]:
    try:
        return columns_read(expression)
    except LineageError:
        return []


def _new_uuid() -> uuid.UUID:
    from openlineage.client.uuid import generate_new_uuid

    return generate_new_uuid()


# ---------------------------------------------------------------------- a refresh
class RefreshLineage:
    """The events of one refresh (job ``refresh`` of the environment's namespace), whose
    outputs are the tables it rebuilds (``tables``: catalog name and location of each); its
    tables' runs name it as their parent."""

    def __init__(self, env: Environment, op: str, tables: Sequence[tuple[str, str]],
                 log: Any) -> None:
        assert env.lineage is not None
        self.env = env
        self.op = op
        self.tables = tables
        self.emitter = Emitter(env.lineage, log)

    @classmethod
    def open(cls, env: Environment, op: str, tables: Sequence[tuple[str, str]],
             log: Any) -> RefreshLineage | None:
        return cls(env, op, tables, log) if env.lineage is not None else None

    @property
    def failures(self) -> int:
        return self.emitter.failures

    def started(self) -> None:
        from openlineage.client.event_v2 import RunState

        self._send(RunState.START)

    def ended(self, state: str, error: str | None = None) -> None:
        """``state``: COMPLETE, FAIL or ABORT."""
        from openlineage.client.event_v2 import RunState

        self._send(RunState(state), error)
        self.emitter.close()

    def _send(self, state: Any, error: str | None = None) -> None:
        from openlineage.client.event_v2 import Job, OutputDataset, Run, RunEvent
        from openlineage.client.facet_v2 import error_message_run, job_type_job

        run_facets: dict[str, Any] = {}
        if error is not None:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=redact(error), programmingLanguage="python")
        job_facets: dict[str, Any] = {"jobType": job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration=INTEGRATION, jobType="REFRESH")}
        try:
            outputs = [OutputDataset(namespace=dataset_name(location)[0],
                                     name=dataset_name(location)[1],
                                     facets=_table_facets(self.env, location, name, None))
                       for name, location in self.tables]
            event = RunEvent(
                eventType=state, eventTime=_now(), producer=PRODUCER,
                run=Run(runId=refresh_run_id(self.env, self.op), facets=run_facets),
                job=Job(namespace=namespace_of(self.env), name="refresh", facets=job_facets),
                outputs=outputs)
        except Exception as exc:
            self.emitter.failed(str(state.value), exc)
            return
        self.emitter.emit(event)
