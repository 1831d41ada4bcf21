"""The single-node Kafka broker of ``deploy/kafka/broker.sh`` (KRaft, in its own JVM), for the
tests and the benchmark: started in a folder on free ports, stopped on the way out; and a few
client helpers (topics, producing) on the confluent-kafka client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "deploy" / "kafka" / "broker.sh"


class BrokerStartError(RuntimeError):
    """The broker did not start; its script's error output is the message."""


@dataclass
class Broker:
    """A broker started by :func:`kafka_broker`: stop and start it again (same data, port)."""

    folder: Path
    port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        started = subprocess.run(["bash", str(SCRIPT), "start", str(self.folder)],
                                 env={**os.environ, "KAFKA_PORT": str(self.port),
                                      "KAFKA_CONTROLLER_PORT": str(self.port + 1)},
                                 capture_output=True, text=True, timeout=180)
        if started.returncode != 0:
            raise BrokerStartError(started.stderr[-3000:])

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", str(self.folder)], timeout=120,
                       check=True)

    # ------------------------------------------------------------------ client helpers
    def create_topic(self, name: str, partitions: int, timeout: float = 60) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout
        while True:  # a topic just deleted is refused until the deletion completes
            try:
                admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
                break
            except Exception as exc:
                if time.monotonic() > deadline or "already exists" not in str(exc):
                    raise
                time.sleep(0.5)
        self._wait(lambda md: name in md.topics and len(md.topics[name].partitions)
                   == partitions and md.topics[name].error is None, timeout)

    def delete_topic(self, name: str, timeout: float = 60) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # alive until answered
        admin.delete_topics([name])[name].result()
        self._wait(lambda md: name not in md.topics, timeout)

    def produce(self, topic: str, records: Iterable[tuple[int, bytes | None, bytes | None]]
                ) -> int:
        """Send ``(partition, key, value)`` records; returns how many were acknowledged."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20,
                             "enable.idempotence": True})
        acked = []

        def done(err: Any, msg: Any) -> None:
            if err is not None:
                raise RuntimeError(f"expected the record acknowledged, found {err}")
            acked.append(1)

        for partition, key, value in records:
            while True:
                try:
                    producer.produce(topic, value=value, key=key, partition=partition,
                                     on_delivery=done)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        left = producer.flush(60)
        if left:
            raise RuntimeError(f"expected every record acknowledged, found {left} unsent")
        return len(acked)

    def _wait(self, ready: Any, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout
        while not ready(admin.list_topics(timeout=10)):
            if time.monotonic() > deadline:
                raise TimeoutError("expected the topic change to show in the metadata")
            time.sleep(0.2)


def json_records(rows: Iterable[dict[str, Any]], partitions: int
                 ) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """Records of JSON values, spread over the partitions in turn, keyed by their position."""
    for i, row in enumerate(rows):
        yield i % partitions, str(i).encode(), json.dumps(row).encode()


def free_port() -> int:
    """A port free for the broker and the next one for its controller."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("expected two free adjacent ports, found none")


@contextmanager
def kafka_broker(folder: Path) -> Iterator[Broker]:
    broker = Broker(folder, free_port())
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
