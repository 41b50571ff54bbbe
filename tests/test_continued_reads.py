"""Reads parked between pages (db.continued_reads): the registry's bounds, and PostgreSQL's forecast pages taken
from one open read: the same pages as fresh reads under any order of requests, the snapshot a read continues in,
connections given back when a read is abandoned, disposed or broken."""

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from db import continued_reads
from db.continued_reads import ParkedReads, parked_reads
from db.engine import create_engine
from db.held import ForecastKey
from db.held_export import sales_forecast_arrow_page
from db.ids import new_id
from db.schema import sales_forecasts
from db.tenants import create_tenant
from serving.metrics import ServerMetrics
from settings import Settings
from tests.conftest import wait_for
from tests.test_held_reads import TODAY, forecast_row

LONG = 3600.0


class Read:
    """A read that counts its closings."""

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


# --- the registry ---------------------------------------------------------------------------------------

class ParkingMachine(RuleBasedStateMachine):
    """Whatever is parked, taken, replaced or dropped, every read ends exactly one way: taken back once, or closed
    once, or still parked; and no more than the capacity is parked."""

    reads = Bundle("reads")

    def __init__(self) -> None:
        super().__init__()
        self.parked = ParkedReads(idle_seconds=LONG, max_age_seconds=LONG, capacity=3)
        self.all: list[Read] = []
        self.taken: list[Read] = []

    @rule(target=reads, key=st.integers(0, 5))
    def park(self, key: int) -> int:
        read = Read()
        self.all.append(read)
        self.parked.park(key, read, time.monotonic())
        return key

    @rule(key=st.integers(0, 5))
    def take(self, key: int) -> None:
        if (taken := self.parked.take(key)) is not None:
            self.taken.append(taken[0])

    @rule(key=consumes(reads))
    def take_what_was_parked(self, key: int) -> None:
        self.take(key)

    @rule()
    def close_all(self) -> None:
        self.parked.close_all()
        assert len(self.parked) == 0

    @invariant()
    def each_read_ends_one_way(self) -> None:
        assert len(self.parked) <= 3
        for read in self.all:
            ends = read.closed + self.taken.count(read)
            assert ends <= 1, "a read closed twice, or both closed and taken"
        assert sum(read.closed == 0 and read not in self.taken for read in self.all) == len(self.parked)

    def teardown(self) -> None:
        self.parked.close_all()


TestParking = ParkingMachine.TestCase
TestParking.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_a_read_is_taken_once_under_its_key() -> None:
    parked, read = ParkedReads(idle_seconds=LONG, max_age_seconds=LONG, capacity=2), Read()
    parked.park("next", read, time.monotonic())
    assert parked.take("other") is None
    assert parked.take("next")[0] is read
    assert parked.take("next") is None and read.closed == 0


def test_the_oldest_read_is_closed_beyond_the_capacity() -> None:
    parked = ParkedReads(idle_seconds=LONG, max_age_seconds=LONG, capacity=2)
    first, second, third = Read(), Read(), Read()
    for key, read in (("a", first), ("b", second), ("c", third)):
        parked.park(key, read, time.monotonic())
    assert (first.closed, second.closed, third.closed) == (1, 0, 0)
    assert parked.take("a") is None and parked.take("c")[0] is third


def test_an_idle_read_is_closed_without_any_request() -> None:
    parked, read = ParkedReads(idle_seconds=0.2, max_age_seconds=LONG, capacity=2), Read()
    parked.park("next", read, time.monotonic())
    wait_for(lambda: read.closed, 5, "the idle read to be closed")
    assert parked.take("next") is None and read.closed == 1


def test_a_read_expiring_sooner_than_those_parked_is_closed_on_time() -> None:
    """The reaper, waiting for the first read's expiry an hour away, is woken for a read parked later that expires
    sooner (opened nearly the maximum age ago), and not held to the first one's hour."""
    parked = ParkedReads(idle_seconds=LONG, max_age_seconds=30, capacity=2)
    lasting, expiring = Read(), Read()
    parked.park("lasting", lasting, time.monotonic())
    time.sleep(0.1)  # the reaper waits for "lasting" by now
    parked.park("expiring", expiring, time.monotonic() - 29.7)
    wait_for(lambda: expiring.closed, 5, "the read past its maximum age to be closed")
    assert lasting.closed == 0 and parked.take("lasting")[0] is lasting


def test_a_read_too_old_is_not_continued() -> None:
    parked, read = ParkedReads(idle_seconds=LONG, max_age_seconds=30, capacity=2), Read()
    parked.park("next", read, time.monotonic() - 31)
    assert parked.take("next") is None
    assert read.closed == 1


# --- PostgreSQL's forecast pages --------------------------------------------------------------------------

@pytest.fixture
def paging_engine(engine: sa.Engine, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Any:
    """PostgreSQL: an engine of its own on the session's database (parked reads are per engine), reads idle for
    half a second dropped. DuckDB reads each page afresh (an open result would hold its connection's statements):
    the session's engine."""
    if engine.dialect.name != "postgresql":
        yield engine
        return
    monkeypatch.setattr(continued_reads, "IDLE_SECONDS", 0.5)
    own = create_engine(settings)
    yield own
    own.dispose()


@pytest.fixture
def pg_engine(paging_engine: sa.Engine) -> sa.Engine:
    if paging_engine.dialect.name != "postgresql":
        pytest.skip("DuckDB reads each page afresh: an open result would hold its connection's statements")
    return paging_engine


def hold(engine: sa.Engine, keys: list[tuple[bool, str, str]]) -> str:
    tenant_id = create_tenant(engine, f"continued reads {new_id()}", is_test=True)
    if keys:
        with engine.begin() as conn:
            conn.execute(sales_forecasts.insert(), [forecast_row(tenant_id, *key, quantity="3",
                                                                 end=TODAY + timedelta(days=2)) for key in keys])
    return tenant_id


def page(engine: sa.Engine, tenant_id: str, after: ForecastKey | None, limit: int) -> tuple[list[tuple], Any]:
    read = sales_forecast_arrow_page(engine, tenant_id, retail_store_number=None, ecom_store_number=None,
                                     after=after, limit=limit, today=TODAY)
    rows = [(row["ecomStoreNumber"] is not None, row["retailStoreNumber"] or row["ecomStoreNumber"],
             row["skuNumber"]) for row in read.table.to_pylist()]
    return rows, read.next


def expected_page(held: list[tuple[bool, str, str]], after: ForecastKey | None,
                  limit: int) -> tuple[list[tuple], ForecastKey | None]:
    """The page after the key as its definition says: the first store's rows up to the limit; a next key when any
    row follows."""
    later = [key for key in sorted(held) if after is None or key > (after.is_ecom, after.store_number,
                                                                      after.sku_number)]
    rows = [key for key in later if key[:2] == later[0][:2]][:limit] if later else []
    return rows, ForecastKey(*rows[-1]) if len(later) > len(rows) else None


_numbers = st.sampled_from(["1", "10", "2", "a'b", "a\\b"])


@given(held=st.sets(st.tuples(st.booleans(), _numbers, _numbers), max_size=20),
       steps=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 3)), min_size=1, max_size=12))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_pages_are_the_pages_of_their_key_however_they_are_asked_for(
        paging_engine: sa.Engine, held: set[tuple[bool, str, str]], steps: list[tuple[int, int]]) -> None:
    """A client follows the cursors with changing limits, and now and then asks again for a page it had (a retry,
    another client with the same cursor): every answer is the page of its key and limit, continued or not."""
    held_keys = sorted(held)
    tenant_id = hold(paging_engine, held_keys)
    cursors: list[ForecastKey | None] = [None]
    for limit, back in steps:
        after = cursors[max(len(cursors) - 1 - back, 0)]
        rows, following = page(paging_engine, tenant_id, after, limit)
        assert (rows, following) == expected_page(held_keys, after, limit)
        if following is not None and after is cursors[-1]:
            cursors.append(following)


def test_a_continued_read_pages_the_data_as_it_was_when_it_began(pg_engine: sa.Engine) -> None:
    """From the second page on, pages come from one read: rows deleted meanwhile are still paged while it lasts;
    once it has been idle too long, the next page reads afresh and sees the change."""
    keys = [(False, store, sku) for store in ("1", "2", "3", "4") for sku in ("1", "2")]
    tenant_id = hold(pg_engine, keys)
    _, after = page(pg_engine, tenant_id, None, 2)
    second, after = page(pg_engine, tenant_id, after, 2)
    assert second == keys[2:4] and len(parked_reads(pg_engine)) == 1
    with pg_engine.begin() as conn:
        conn.execute(sales_forecasts.delete().where(sales_forecasts.c.tenant_id == tenant_id,
                                                    sales_forecasts.c.store_number.in_(["3", "4"])))
    third, after = page(pg_engine, tenant_id, after, 2)
    assert third == keys[4:6]
    wait_for(lambda: not len(parked_reads(pg_engine)), 5, "the idle read to be dropped")
    assert page(pg_engine, tenant_id, after, 2) == ([], None)


BIG = 60_000  # rows (of 28 days each): more than the driver's batches and the socket's buffers hold


@pytest.fixture(scope="module")
def big_tenant(engine: sa.Engine) -> str:
    """A tenant holding BIG forecasts of one store, SKUs 000001…: a read of them stops mid-COPY when parked."""
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL only")
    tenant_id = create_tenant(engine, f"continued reads big {new_id()}", is_test=True)
    row = forecast_row(tenant_id, False, "1", "", quantity="3", end=TODAY + timedelta(days=26))
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO sales_forecasts (tenant_id, is_ecom, store_number, sku_number, horizon_start_date, "
            "horizon_end_date, quantities, generated_at, modified_time, batch_id) "
            "SELECT :tenant_id, false, '1', lpad(i::text, 6, '0'), :horizon_start_date, :horizon_end_date, "
            ":quantities, :generated_at, :modified_time, :batch_id FROM generate_series(1, :rows) AS i"),
            {**row, "rows": BIG})
    return tenant_id


def sku(number: int) -> tuple[bool, str, str]:
    return False, "1", f"{number:06}"


def copies_running(engine: sa.Engine) -> int:
    """The sessions of the database in the middle of a COPY (a read parked mid-stream), seen from another."""
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                    "AND state = 'active' AND query LIKE 'COPY%' AND pid <> pg_backend_pid()")
                            ).scalar_one()


def start_paging(engine: sa.Engine, tenant_id: str) -> ForecastKey:
    """The first two pages of one row read, the second from a read now parked mid-COPY; the key after them."""
    _, after = page(engine, tenant_id, None, 1)
    rows, after = page(engine, tenant_id, after, 1)
    assert rows == [sku(2)] and len(parked_reads(engine)) == 1
    wait_for(lambda: copies_running(engine) == 1, 10, "the parked read's COPY")
    return after


def test_an_abandoned_read_gives_its_connection_back(pg_engine: sa.Engine, big_tenant: str) -> None:
    """…and /metrics tells how many reads are parked, while they are."""
    metrics = ServerMetrics(pg_engine)
    start_paging(pg_engine, big_tenant)
    assert metric_value(metrics, "pia_parked_reads") == 1
    wait_for(lambda: copies_running(pg_engine) == 0, 10, "the abandoned read's COPY to end")
    assert len(parked_reads(pg_engine)) == 0 and metric_value(metrics, "pia_parked_reads") == 0


def metric_value(metrics: ServerMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    assert value is not None, f"{name} is not exposed"
    return value


def test_disposing_the_engine_closes_its_parked_reads(pg_engine: sa.Engine, settings: Settings,
                                                      big_tenant: str) -> None:
    start_paging(pg_engine, big_tenant)
    pg_engine.dispose()
    assert len(parked_reads(pg_engine)) == 0
    observer = create_engine(settings)
    try:
        wait_for(lambda: copies_running(observer) == 0, 10, "the disposed engine's COPY to end")
    finally:
        observer.dispose()


def test_a_parked_read_whose_connection_died_is_read_afresh(pg_engine: sa.Engine, big_tenant: str) -> None:
    after = start_paging(pg_engine, big_tenant)
    with pg_engine.connect() as conn:
        killed = conn.execute(sa.text(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
            "AND state = 'active' AND query LIKE 'COPY%' AND pid <> pg_backend_pid()")).scalars().all()
    assert killed == [True]
    rows, after = page(pg_engine, big_tenant, after, BIG)  # more rows than the read had taken in
    assert rows == [sku(number) for number in range(3, BIG + 1)] and after is None


def test_requests_racing_for_one_cursor_each_get_its_page(pg_engine: sa.Engine, big_tenant: str) -> None:
    """Several requests bring the same cursor at once (retries, a client's threads): one takes the parked read, the
    others read afresh, and every one answers the page of that key."""
    after = start_paging(pg_engine, big_tenant)
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(lambda _: page(pg_engine, big_tenant, after, 3), range(6)))
    assert answers == [([sku(3), sku(4), sku(5)], ForecastKey(*sku(5)))] * 6
    assert len(parked_reads(pg_engine)) <= continued_reads.CAPACITY
