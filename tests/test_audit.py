"""The audit writer: rows leave the request path, are written in batches, survive shutdown and a database outage."""

import logging
import re
import uuid
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from db.audit import AuditEvent, AuditWriter
from db.engine import create_engine
from db.ids import utc_now
from db.migrate import upgrade
from db.schema import audit_events
from serving.app import create_app
from settings import Settings
from tests.conftest import (
    ENV,
    LiveServer,
    bearer,
    client_of,
    free_port,
    get_token,
    service_missing,
    wait_for,
    without_upload_workers,
)

pytestmark = pytest.mark.without_shop


def _event(**overrides: object) -> AuditEvent:
    values = {"tenant_id": "audit-test", "client_id": "audit-test", "token_id": "t", "request_id": str(uuid.uuid4()),
              "method": "GET", "path": "/v1/x", "status": 200, "duration_ms": 1.0, "time": utc_now(), **overrides}
    return AuditEvent(**values)  # type: ignore[arg-type]


def _written(engine: sa.Engine, request_ids: list[str]) -> dict[str, sa.Row]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(audit_events).where(audit_events.c.request_id.in_(request_ids)))
        return {row.request_id: row for row in rows}


def test_rows_waiting_at_shutdown_are_written_before_the_server_stops(settings, engine, world, monkeypatch) -> None:
    # No timed flush within the test: a row can only reach the table through the shutdown.
    monkeypatch.setattr("db.audit.FLUSH_SECONDS", 600.0)
    port = free_port()
    live = LiveServer(create_app(without_upload_workers(settings), engine, issuer=f"http://127.0.0.1:{port}"), port)
    live.start()
    try:
        with httpx.Client(base_url=live.url, timeout=30) as http:
            token = bearer(get_token(http, world, client_of(world, "demand_planning")))
            request_ids = [str(uuid.uuid4()) for _ in range(5)]
            for request_id in request_ids:
                response = http.get(f"/v1/tenants/{world['id']}/demand_planning/limits",
                                    headers={**token, "X-Request-Id": request_id})
                assert response.status_code == 200
        assert _written(engine, request_ids) == {}  # answered before their audit rows were written
    finally:
        live.stop()
    assert set(_written(engine, request_ids)) == set(request_ids)


def test_every_field_of_a_batch_is_written_as_submitted(engine) -> None:
    """A batch goes in as Arrow columns (DuckDB reads them, PostgreSQL takes them by COPY): each row whole, the path
    cut to the column and NUL made U+FFFD on both backends, each row with an id of its own."""
    long_path = "/v1/" + "x" * 2500
    events = [_event(status=200 + n, duration_ms=n + 0.125, method="PUT" if n % 2 else "GET",
                     path=long_path if n == 3 else "/v1/\x00" if n == 4 else f"/v1/{n}?q=é") for n in range(7)]
    writer = AuditWriter(engine)
    writer.start()
    try:
        for event in events:
            writer.submit(event)
        assert writer.flush(timeout=30)
    finally:
        writer.close()
    written = _written(engine, [event.request_id for event in events])
    for n, event in enumerate(events):
        row = written[event.request_id]
        expected_path = long_path[:2000] if n == 3 else "/v1/\N{REPLACEMENT CHARACTER}" if n == 4 else event.path
        assert (row.tenant_id, row.client_id, row.token_id, row.method, row.path, row.status, row.duration_ms) == (
            event.tenant_id, event.client_id, event.token_id, event.method, expected_path, event.status,
            event.duration_ms)
        assert row.time.replace(tzinfo=event.time.tzinfo) == event.time  # DuckDB hands back naive UTC
        assert uuid.UUID(row.id).version == 7
    assert len({row.id for row in written.values()}) == len(events)


@pytest.fixture
def missing_database() -> Iterator[tuple[sa.Engine, sa.Engine]]:
    """An engine on a PostgreSQL database that does not exist yet (every connection fails), and the server's
    administrative engine to create it with."""
    admin = sa.create_engine(ENV.test_postgres_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        admin.connect().close()
    except sa.exc.OperationalError as error:
        service_missing(f"PostgreSQL at {ENV.test_postgres_url} is not reachable: {error.orig}")
    name = f"pia_audit_{uuid.uuid4().hex[:12]}"
    url = sa.make_url(ENV.test_postgres_url).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(Settings(database_url=url))
    yield engine, admin
    engine.dispose()
    with admin.connect() as conn:
        for database in (name, f"{name}_ready"):
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
    admin.dispose()


def test_rows_wait_for_an_unreachable_database_and_overflow_is_dropped_loudly(
        missing_database, caplog, monkeypatch) -> None:
    engine, admin = missing_database
    caplog.set_level(logging.WARNING, logger="db.audit")
    monkeypatch.setattr("db.audit.QUEUE_ROWS", 3)
    monkeypatch.setattr("db.audit.BATCH_ROWS", 2)
    writer = AuditWriter(engine)
    writer.start()
    try:
        events = [_event() for _ in range(20)]
        for event in events:
            writer.submit(event)  # never blocks, whatever the database does
        wait_for(lambda: any("audit rows dropped" in record.getMessage() and record.levelno == logging.ERROR
                             for record in caplog.records), 30, "the dropped rows to be logged as an error")
        assert any("database unreachable" in record.getMessage() for record in caplog.records)

        # The database comes back, tables and all: migrated under another name, then renamed in one step.
        ready = engine.url.set(database=f"{engine.url.database}_ready")
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{ready.database}"'))
        migrating = sa.create_engine(ready)
        upgrade(migrating)
        migrating.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{ready.database}" RENAME TO "{engine.url.database}"'))
        assert writer.flush(timeout=30)
    finally:
        writer.close()
    written = _written(engine, [event.request_id for event in events])
    dropped = sum(int(match[1]) for record in caplog.records
                  if (match := re.search(r"(\d+) audit rows dropped", record.getMessage())))
    # The queue and the batch in hand held what they could; the rest is accounted for in the log.
    assert len(written) >= 3 and len(written) + dropped == len(events)


def test_a_row_the_database_refuses_costs_only_that_row(postgres_url, tmp_path, caplog) -> None:
    engine = create_engine(Settings(data_dir=tmp_path, database_url=postgres_url))
    upgrade(engine)
    writer = AuditWriter(engine)
    writer.start()
    try:
        refused = _event(method="M" * 20)  # longer than the column: PostgreSQL refuses the row
        nul_path = _event(path="/v1/tenants/\x00/demand_planning/limits")
        kept = [_event(), nul_path, _event()]
        for event in (kept[0], refused, *kept[1:]):
            writer.submit(event)
        assert writer.flush(timeout=30)
    finally:
        writer.close()
        engine.dispose()
    written = _written(engine, [event.request_id for event in (*kept, refused)])
    assert set(written) == {event.request_id for event in kept}
    assert written[nul_path.request_id].path == "/v1/tenants/\N{REPLACEMENT CHARACTER}/demand_planning/limits"
    assert any(refused.request_id in record.getMessage() and record.levelno == logging.ERROR
               for record in caplog.records)


def test_shutdown_gives_up_on_an_unreachable_database_and_says_how_many_rows_are_lost(
        missing_database, caplog, monkeypatch) -> None:
    engine, _ = missing_database
    caplog.set_level(logging.WARNING, logger="db.audit")
    monkeypatch.setattr("db.audit.CLOSE_SECONDS", 0.5)
    monkeypatch.setattr("db.audit.BATCH_ROWS", 2)
    writer = AuditWriter(engine)
    writer.start()
    for _ in range(5):
        writer.submit(_event())
    writer.close()  # returns although the database never comes back
    lost = sum(int(match[1]) for record in caplog.records
               if (match := re.search(r"(\d+) audit rows lost", record.getMessage())))
    assert lost == 5
