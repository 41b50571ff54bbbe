"""The in-process roles' polls on DuckDB (db.polls): after a round that found nothing to do, the order processor, the
pipeline worker, the outbox bridge and the Kafka relay ask the database nothing until a commit that counts (any but
audit rows' and heartbeats'), or until the earliest retry they wait for has come; on PostgreSQL, which other
processes write, every round asks. Each in a store of the test's own, both backends."""

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta

import sqlalchemy as sa

from db.audit import AuditEvent, insert_events
from db.engine import create_engine, is_duckdb
from db.ids import new_id, utc_now
from db.order_failures import processing_state
from db.order_processing import run_order_processor
from db.outbox import pair_events
from db.polls import PollGate
from db.schema import event_outbox
from db.workers import beat
from events.bridge import run_bridge
from events.relay import run_relay
from pipeline.worker import Pipeline
from rules.retry import RetryPolicy
from tests.conftest import wait_for
from tests.kafka_broker import KafkaBroker, kafka  # noqa: F401 - the fixture
from tests.test_order_processing import RefusedOpening, Shop

QUIET_SECONDS = 1.5  # a window of rounds every 0.1 s


class Statements:
    """Counts the statements the engine runs in one thread (the role's), whatever else runs meanwhile."""

    def __init__(self, engine: sa.Engine, thread_name: str) -> None:
        self.engine, self.thread_name, self.count = engine, thread_name, 0
        sa.event.listen(engine, "before_cursor_execute", self._counted)

    def _counted(self, *_: object) -> None:
        if threading.current_thread().name.startswith(self.thread_name):  # the role's thread, or its own workers'
            self.count += 1

    def during(self, seconds: float) -> int:
        before = self.count
        time.sleep(seconds)
        return self.count - before

    def close(self) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._counted)


@contextmanager
def role_thread(engine: sa.Engine, name: str, run: Callable[[threading.Event, threading.Event], None]
                ) -> Iterator[tuple[Statements, threading.Event]]:
    """The role running in a thread of its own, with its statements counted; (statements, its wake)."""
    statements, stop, wake = Statements(engine, name), threading.Event(), threading.Event()
    thread = threading.Thread(target=run, args=(stop, wake), name=name)
    thread.start()
    try:
        wait_for(lambda: statements.count, 30, f"the {name}'s first round")
        settled(engine, statements, f"the {name}'s rounds after its first")  # opened by its own commits
        yield statements, wake
    finally:
        stop.set()
        wake.set()
        thread.join()
        statements.close()


def settled(engine: sa.Engine, statements: Statements, what: str) -> None:
    """Wait for the rounds a role's own commits open to end: on DuckDB until it asks nothing for 0.5 s (a fixed
    wait let the tail of a slow round into a quiet window on a busy machine); on PostgreSQL, where every round
    asks, half a second."""
    if is_duckdb(engine):
        wait_for(lambda: statements.during(0.5) == 0, 30, f"{what} to end")
    else:
        time.sleep(0.5)


def assert_idle_rounds_ask(engine: sa.Engine, statements: Statements) -> None:
    """Nothing asked in a quiet window on DuckDB; a round's queries every 0.1 s on PostgreSQL."""
    asked = statements.during(QUIET_SECONDS)
    if is_duckdb(engine):
        assert asked == 0, f"{asked} statements in {QUIET_SECONDS} s of nothing to do"
    else:
        assert asked >= 5, asked


def test_the_gate_opens_on_a_counted_commit_or_when_due_and_always_on_postgresql(own_store) -> None:
    settings, engine = own_store
    other = create_engine(settings)  # another engine on the same database, as tests and tools make
    try:
        gate = PollGate(engine)
        assert gate.open()
        gate.polling()
        gate.idle()
        insert_events(other, [AuditEvent(new_id(), new_id(), new_id(), new_id(), "GET", "/v1/x", 200, 1.0, utc_now())])
        assert gate.open() is not is_duckdb(engine)  # closed on DuckDB: audit rows' commits are quiet
        beat(other, new_id(), utc_now())
        assert gate.open() is not is_duckdb(engine)  # and so are a worker's heartbeats
        with other.begin() as conn:  # any other commit
            conn.execute(sa.text("SELECT 1"))
        assert gate.open()
        gate.polling()
        gate.idle(utc_now() + timedelta(seconds=0.5))
        assert gate.open() is not is_duckdb(engine)
        time.sleep(0.6)
        assert gate.open()  # the due time has come
    finally:
        other.dispose()


def test_an_idle_order_processor_asks_nothing_until_an_order_is_committed_or_a_retry_comes_due(own_store) -> None:
    settings, engine = own_store
    shop = Shop(engine)
    refused = RefusedOpening(shop)
    # The next attempt 3–6 s later: a quiet window is left before it even when this machine is slow to see the first.
    retry = RetryPolicy(max_attempts=5, base_seconds=6.0, max_seconds=6.0)

    def processor(stop: threading.Event, wake: threading.Event) -> None:
        run_order_processor(engine, retry, stop, wake, 0.1)

    with role_thread(engine, "order-processor", processor) as (statements, _):
        assert_idle_rounds_ask(engine, statements)
        order = shop.receive((shop.skus[0], 1))  # committed; nobody wakes the processor
        wait_for(lambda: shop.opened(order)[0] == "OPEN", 5, "the order to open at the next round")
        failing = shop.receive((refused.sku, 1), customer_id=refused.customer_id)
        state = wait_for(lambda: (state := processing_state(engine, shop.tenant_id, failing)).attempts and state,
                         5, "the first attempt")
        assert state.retry_at is not None
        settled(engine, statements, "the rounds after the failure's commit")
        if is_duckdb(engine):
            quiet = (state.retry_at - utc_now()).total_seconds() - 0.3
            assert quiet > 0.5 and statements.during(min(quiet, QUIET_SECONDS)) == 0
        wait_for(lambda: processing_state(engine, shop.tenant_id, failing).attempts == 2, 15, "the retry")
        assert utc_now() - state.retry_at < timedelta(seconds=2)  # tried once due, not at the safety recheck


def test_an_idle_pipeline_worker_asks_nothing_until_something_is_committed(own_store) -> None:
    settings, engine = own_store
    pipeline = Pipeline.from_settings(settings, engine)

    def worker(stop: threading.Event, wake: threading.Event) -> None:
        pipeline.run(stop, wake, 0.1)

    with role_thread(engine, "pipeline-worker", worker) as (statements, wake):
        assert_idle_rounds_ask(engine, statements)
        before = statements.count
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT 1"))
        wait_for(lambda: statements.count > before, 5, "a round after the commit")
        settled(engine, statements, "that round's own rounds after it")
        before = statements.count
        wake.set()  # an upload's wake
        wait_for(lambda: statements.count > before, 5, "a round once woken")


def test_an_idle_outbox_bridge_asks_nothing_until_something_is_committed(own_store) -> None:
    settings, engine = own_store
    settings = settings.with_changes(bridge={"poll_seconds": 0.1})

    def bridge(stop: threading.Event, _wake: threading.Event) -> None:
        async def run() -> None:
            # The bridge reads in the loop's worker threads: named so that its statements are counted.
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(thread_name_prefix="bridge"))
            stopped = asyncio.Event()
            delivering = asyncio.create_task(run_bridge(settings, engine, stopped))
            await asyncio.to_thread(stop.wait)
            stopped.set()
            await delivering
        asyncio.run(run())

    with role_thread(engine, "bridge", bridge) as (statements, _):
        assert_idle_rounds_ask(engine, statements)
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT 1"))
        before = statements.count
        wait_for(lambda: statements.count > before, 5, "a poll after the commit")


def test_an_idle_relay_asks_nothing_until_an_event_is_committed(own_store, kafka: KafkaBroker) -> None:  # noqa: F811
    settings, engine = own_store
    settings = settings.with_changes(kafka={"bootstrap_servers": kafka.bootstrap_servers}, relay={"poll_seconds": 0.1})
    kafka.create_topic(settings.kafka.topic, 1)
    tenant_id = new_id()

    def relay(stop: threading.Event, _wake: threading.Event) -> None:
        run_relay(settings, engine, stop)

    with role_thread(engine, "relay", relay) as (statements, _):
        assert_idle_rounds_ask(engine, statements)
        with engine.begin() as conn:  # committed: PostgreSQL's NOTIFY wakes the relay, DuckDB's count opens its gate
            pair_events(conn, tenant_id, "INVENTORY_UPDATED", [(new_id(), new_id())])

        def published() -> bool:
            with engine.connect() as conn:
                return conn.scalar(sa.select(event_outbox.c.published_time)
                                   .where(event_outbox.c.tenant_id == tenant_id)) is not None
        wait_for(published, 10, "the event published at the next round")
        settled(engine, statements, "the round after the publishing round's own commit")
        assert_idle_rounds_ask(engine, statements)
