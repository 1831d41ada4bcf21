"""The spec of a bronze feed read from a log of records, not from files: Apache Kafka, or Azure
Event Hubs through its Kafka endpoint, with Spark's own Kafka source.

Each record's value is a JSON document, parsed as a JSON line of a file feed is: the schema's
columns, keys outside it in the rescued column, malformed values to the quarantine with their
topic, partition and offset. ``eventhubs`` is a convenience over ``kafka``: it fills in the
endpoint (``<namespace>.servicebus.windows.net:9093``), ``SASL_SSL`` with ``PLAIN``, and the
JAAS line whose user is ``$ConnectionString`` and whose password is the connection string, a
secret reference resolved only when the stream is built (never in a log, an error, a ``repr``,
or a plan: Spark redacts an option whose value matches ``spark.redaction.regex``, which the
framework extends to JAAS lines).

``fail_on_data_loss`` (Spark's ``failOnDataLoss``) is true by default: when offsets the query
has not read are gone (a topic deleted and created again, records expired by retention before
they were read), the run fails and names the topic and partitions. Set to false, the query
goes on from the earliest offset still there, the records in between are never read, and each
such jump is logged (``bronze.kafka.offsets_lost``) and counted in the run summary.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import Field, PositiveInt, model_validator

from bronze.cdc import CdcSpec, cdc_problems
from bronze.spec import SchemaEvolution
from framework.config.model import Layer, SqlKind, SqlText, Table, TableSpec
from framework.config.secrets import SecretRef
from framework.config.types import Identifier, Model, Text
from framework.errors import ConfigError

DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024
EVENTHUBS_PORT = 9093
EVENTHUBS_DOMAIN = "servicebus.windows.net"
LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
# Databricks' runtime ships the Kafka client shaded under this prefix.
DATABRICKS_LOGIN_MODULE = f"kafkashaded.{LOGIN_MODULE}"
# Options Spark's Kafka source manages itself, or that this spec sets by name.
RESERVED = ("group.id", "auto.offset.reset", "key.deserializer", "value.deserializer",
            "enable.auto.commit", "interceptor.classes", "bootstrap.servers",
            "sasl.jaas.config")


class StreamFormat(StrEnum):
    """Logs of records bronze reads."""

    KAFKA = "kafka"
    EVENTHUBS = "eventhubs"  # Azure Event Hubs, through its Kafka endpoint


class StreamSource(Model):
    """What Kafka and Event Hubs feeds share: the records' schema and how far to read."""

    schema_: str | None = Field(
        default=None, alias="schema",
        description="DDL of the records in each value, e.g. 'id BIGINT, name STRING'.")
    starting_offsets: Literal["earliest", "latest"] | dict[str, dict[int, int]] = Field(
        default="earliest",
        description="Where a new query starts: earliest, latest, or per topic and partition "
        "an offset (-2 earliest, -1 latest). A restart always goes on from its checkpoint.")
    max_offsets_per_trigger: PositiveInt | None = None
    min_partitions: PositiveInt | None = None
    fail_on_data_loss: bool = True
    options: dict[str, Text] = Field(
        default_factory=dict, description="from_json options for the values (as for files).")
    kafka_options: dict[str, Text] = Field(
        default_factory=dict,
        description="Kafka client settings, without the 'kafka.' prefix (e.g. "
        "'request.timeout.ms'); never a secret.")
    max_record_bytes: PositiveInt = DEFAULT_MAX_RECORD_BYTES
    schema_evolution: SchemaEvolution = Field(
        default=SchemaEvolution.RESCUE,
        description="What a new key or a value of another type does: rescue (the default), "
        "failOnNewColumns or none (addNewColumns is for file feeds).")

    @model_validator(mode="after")
    def _evolution_of_a_log(self) -> StreamSource:
        if self.schema_evolution is SchemaEvolution.ADD_NEW_COLUMNS:
            raise ValueError("expected schema_evolution rescue, failOnNewColumns or none for a "
                             "Kafka or Event Hubs feed, found addNewColumns (file feeds only)")
        return self

    @model_validator(mode="after")
    def _no_reserved_options(self) -> StreamSource:
        taken = sorted(k for k in self.kafka_options if k.removeprefix("kafka.") in RESERVED)
        if taken:
            raise ValueError(f"expected kafka_options without {', '.join(taken)} (set by the "
                             "source's own keys, or by Spark), found them")
        return self

    def spark_options(self, *, databricks: bool = False) -> dict[str, str]:
        """The options of ``spark.readStream.format("kafka")``, secrets resolved."""
        options = self.endpoint(databricks=databricks)  # the user's settings win
        options |= {f"kafka.{k.removeprefix('kafka.')}": v for k, v in self.kafka_options.items()}
        starting = self.starting_offsets
        options["startingOffsets"] = starting if isinstance(starting, str) else \
            _json({t: {str(p): o for p, o in parts.items()} for t, parts in starting.items()})
        options["failOnDataLoss"] = str(self.fail_on_data_loss).lower()
        if self.max_offsets_per_trigger:
            options["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        if self.min_partitions:
            options["minPartitions"] = str(self.min_partitions)
        return options

    def endpoint(self, *, databricks: bool = False) -> dict[str, str]:
        """The servers, the topics and (for Event Hubs) the authentication."""
        raise NotImplementedError

    def client_settings(self) -> dict[str, str]:
        """The same endpoint for a Python Kafka client (``medallion status``'s offsets)."""
        raise NotImplementedError

    def topics(self) -> list[str] | None:
        """The topics read, or None for a pattern."""
        raise NotImplementedError


class KafkaSource(StreamSource):
    """An Apache Kafka cluster's topics."""

    format: Literal[StreamFormat.KAFKA]
    bootstrap_servers: Text = Field(description="host:port[,host:port...]")
    topics_: list[Text] | None = Field(default=None, alias="topics")
    topic_pattern: Text | None = Field(default=None, description="a Java regex of topic names")

    @model_validator(mode="after")
    def _topics_or_pattern(self) -> KafkaSource:
        if (self.topics_ is None) == (self.topic_pattern is None):
            raise ValueError("expected exactly one of topics (a list) and topic_pattern, found "
                             + ("both" if self.topics_ else "neither"))
        if self.topics_ is not None and not self.topics_:
            raise ValueError("expected at least one topic in topics, found an empty list")
        return self

    def endpoint(self, *, databricks: bool = False) -> dict[str, str]:
        subscribe = {"subscribe": ",".join(self.topics_)} if self.topics_ else \
            {"subscribePattern": str(self.topic_pattern)}
        return {"kafka.bootstrap.servers": self.bootstrap_servers, **subscribe}

    def client_settings(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap_servers}

    def topics(self) -> list[str] | None:
        return list(self.topics_) if self.topics_ else None


class EventHubsSource(StreamSource):
    """An Azure Event Hub, read through the namespace's Kafka endpoint."""

    format: Literal[StreamFormat.EVENTHUBS]
    namespace: Text = Field(description=f"the namespace, or its host <name>.{EVENTHUBS_DOMAIN}")
    event_hub: Text
    connection_string: SecretRef = Field(
        description="a secret reference to the namespace's or hub's connection string")

    def host(self) -> str:
        return self.namespace if "." in self.namespace else \
            f"{self.namespace}.{EVENTHUBS_DOMAIN}"

    def endpoint(self, *, databricks: bool = False) -> dict[str, str]:
        module = DATABRICKS_LOGIN_MODULE if databricks else LOGIN_MODULE
        secret = self.connection_string.resolve().replace("\\", "\\\\").replace('"', '\\"')
        return {
            "kafka.bootstrap.servers": f"{self.host()}:{EVENTHUBS_PORT}",
            "subscribe": self.event_hub,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config":
                f'{module} required username="$ConnectionString" password="{secret}";',
            # Event Hubs' recommended client timeouts for its Kafka endpoint.
            "kafka.request.timeout.ms": "60000",
            "kafka.session.timeout.ms": "30000",
        }

    def client_settings(self) -> dict[str, str]:
        return {"bootstrap.servers": f"{self.host()}:{EVENTHUBS_PORT}",
                "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                "sasl.username": "$ConnectionString",
                "sasl.password": self.connection_string.resolve()}

    def topics(self) -> list[str] | None:
        return [self.event_hub]


class StreamTableSpec(TableSpec):
    """A feed's bronze table: the records of Kafka topics (or an Event Hub) appended exactly
    once, malformed ones to ``<table>_quarantine``."""

    layer: ClassVar[Layer] = Layer.BRONZE

    source: KafkaSource | EventHubsSource = Field(discriminator="format")
    rescued_column: Identifier | None = "_rescued_data"
    cdc: CdcSpec | None = Field(
        default=None, description="The values are change events: 'debezium', or "
        "{format: debezium, sequence: [source.lsn]} (see bronze.cdc).")

    def sql_texts(self) -> list[SqlText]:
        schema = self.source.schema_
        return [*([SqlText("source.schema", SqlKind.SCHEMA, schema)] if schema else []),
                *(self.cdc.sql_texts() if self.cdc else [])]

    def external_sources(self) -> list[tuple[str, str]]:
        """Its topics (a pattern as written), as OpenLineage names Kafka's: namespace
        ``kafka://<first bootstrap server>``."""
        src = self.source
        if isinstance(src, KafkaSource):
            server = src.bootstrap_servers.split(",")[0].strip()
            names = src.topics() or [src.topic_pattern or ""]
        else:
            server, names = f"{src.host()}:{EVENTHUBS_PORT}", [src.event_hub]
        return [(f"kafka://{server}", name) for name in names]

    def check(self, table: Table) -> list[ConfigError]:
        return cdc_problems(self.cdc, json_feed=True, found_format=self.source.format.value,
                            schema=self.source.schema_, rescued_column=self.rescued_column)


def kafka_package() -> str:
    """The Maven coordinate of Spark's Kafka source matching the installed pyspark (Databricks'
    runtime has its own)."""
    import pyspark

    from framework.session import SCALA_VERSION

    return f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_VERSION}:{pyspark.__version__}"


def _json(value: object) -> str:
    import json

    return json.dumps(value, separators=(",", ":"))
