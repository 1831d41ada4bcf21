"""Where a Kafka (or Event Hubs) feed stands, for ``medallion status``: per topic and partition,
the next offset bronze will read, the latest offset of the topic, and the lag."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import functions as F

# The columns of a stream feed's bronze table (and quarantine) saying where a record came from
TOPIC = "_topic"
PARTITION = "_partition"
OFFSET = "_offset"
KAFKA_TIMESTAMP = "_kafka_timestamp"
KEY = "_key"


def partition_offsets(spark: Any, locations: Sequence[str], topics: list[str] | None,
                      client: Mapping[str, str]) -> list[dict[str, Any]]:
    """Per topic and partition: the next offset bronze will read (one past the highest it
    holds, in the tables at ``locations``: bronze and its quarantine), the latest offset of
    the topic (asked with the Kafka client settings ``client``), and the lag."""
    from framework.delta import is_delta_table, read_table

    reached: dict[tuple[str, int], int] = {}
    for loc in locations:
        if not is_delta_table(spark, loc):
            continue
        for row in read_table(spark, loc).groupBy(TOPIC, PARTITION) \
                .agg(F.max(OFFSET).alias("m")).collect():
            key = (row[TOPIC], int(row[PARTITION]))
            reached[key] = max(reached.get(key, 0), int(row["m"]) + 1)
    latest = latest_offsets(topics, client)
    rows = []
    for key in sorted(set(latest) | set(reached)):
        committed, end = reached.get(key, 0), latest.get(key)
        rows.append({"topic": key[0], "partition": key[1], "committed": committed,
                     "latest": end, "lag": None if end is None else max(0, end - committed)})
    return rows


def latest_offsets(topics: list[str] | None, client: Mapping[str, str],
                   timeout: float = 10.0) -> dict[tuple[str, int], int]:
    """The end offset of each partition of ``topics`` (a pattern: none listed), asked of the
    brokers with a Kafka client."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    if not topics:
        return {}
    consumer = Consumer({**client, "group.id": "medallion-status", "enable.auto.commit": False})
    try:
        found: dict[tuple[str, int], int] = {}
        try:
            metadata = consumer.list_topics(timeout=timeout)
        except KafkaException:  # no broker answered: the latest offsets are unknown
            return {}
        for topic in topics:
            info = metadata.topics.get(topic)
            if info is None or info.error is not None:
                continue
            for p in info.partitions:
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                            timeout=timeout)
                found[(topic, p)] = int(high)
        return found
    finally:
        consumer.close()
