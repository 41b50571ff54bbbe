"""The audit trail: one row per authenticated request, written in batches off the request path."""

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import sqlalchemy as sa

from store.engine import is_duckdb
from store.ids import new_id
from store.schema import audit_events

log = logging.getLogger(__name__)

# A batch goes out when this many rows wait, or this long after its first row arrived.
BATCH_ROWS = 500
FLUSH_SECONDS = 0.2
# Rows held while the database cannot be reached (about 1 KB each); beyond it new rows are dropped, loudly.
QUEUE_ROWS = 20_000
# Retries of a batch the database could not take back off up to this interval.
MAX_RETRY_SECONDS = 5.0
# How long stopping may keep retrying an unreachable database before the rows still held are given up.
CLOSE_SECONDS = 10.0
PATH_CHARACTERS = audit_events.c.path.type.length


@dataclass(frozen=True)
class AuditEvent:
    tenant_id: str
    client_id: str
    token_id: str
    request_id: str
    method: str
    path: str
    status: int
    duration_ms: float
    time: datetime
    id: str = field(default_factory=new_id)

    def row(self) -> dict[str, object]:
        # A path is as long as the client made it, and may carry a NUL (%00), which PostgreSQL text refuses.
        return {**vars(self), "path": self.path[:PATH_CHARACTERS].replace("\x00", "\N{REPLACEMENT CHARACTER}")}


def insert_events(engine: sa.Engine, events: list[AuditEvent]) -> None:
    """The events in one transaction, by one statement on DuckDB and multi-row INSERTs on PostgreSQL."""
    rows = [event.row() for event in events]
    with engine.begin() as conn:
        if is_duckdb(engine):
            # DuckDB runs an executemany row by row (0.2 ms each); it reads an Arrow table in one statement.
            columns = [column.name for column in audit_events.c]
            table = pa.table({name: [row[name] for row in rows] for name in columns})
            raw = conn.connection.driver_connection
            raw.register("audit_batch", table)
            try:
                names = ", ".join(columns)
                conn.execute(sa.text(f"INSERT INTO audit_events ({names}) SELECT {names} FROM audit_batch"))
            finally:
                raw.unregister("audit_batch")
        else:
            # psycopg sends an executemany as multi-row INSERTs (SQLAlchemy's insertmanyvalues).
            conn.execute(audit_events.insert(), rows)


def client_events(engine: sa.Engine, tenant_id: str, client_id: str, limit: int) -> list[sa.Row]:
    """The newest events of one client, newest first."""
    with engine.connect() as conn:
        return list(conn.execute(
            sa.select(audit_events)
            .where(audit_events.c.tenant_id == tenant_id, audit_events.c.client_id == client_id)
            .order_by(audit_events.c.time.desc(), audit_events.c.id.desc()).limit(limit)))


class _Marker:
    """Put on the queue behind the rows to flush: reached once they are written."""

    def __init__(self, stop: bool = False) -> None:
        self.stop = stop
        self.reached = threading.Event()


class AuditWriter:
    """Takes audit events from requests without waiting and writes them in batches from a thread of its own.

    While the database cannot be reached, the writer keeps its batch and retries with backoff; requests go on
    queueing up to QUEUE_ROWS rows, after which new rows are dropped and the count is logged as an error at
    every retry. `close` writes what is queued (retrying for at most CLOSE_SECONDS) and stops.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._queue: queue.Queue[AuditEvent | _Marker] = queue.Queue(QUEUE_ROWS)
        self._dropped = 0
        self._dropped_lock = threading.Lock()
        self._give_up_at = float("inf")  # set by close
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, event: AuditEvent) -> None:
        """Never blocks: a request's answer does not wait on its audit row."""
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            with self._dropped_lock:
                self._dropped += 1

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event submitted before this call is written; False if that took too long."""
        return self._send(_Marker(), timeout)

    def close(self) -> None:
        """Write what is queued and stop the writer thread; an unreachable database is retried CLOSE_SECONDS."""
        if self._thread.is_alive():
            self._give_up_at = time.monotonic() + CLOSE_SECONDS
            self._send(_Marker(stop=True), None)
            self._thread.join()

    def _send(self, marker: _Marker, timeout: float | None) -> bool:
        try:
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        return marker.reached.wait(timeout)

    def _run(self) -> None:
        while True:
            batch, marker = self._collect()
            if batch:
                self._write(batch)
            self._report_dropped()
            if marker is not None:
                marker.reached.set()
                if marker.stop:
                    return

    def _collect(self) -> tuple[list[AuditEvent], _Marker | None]:
        """The next batch: rows until BATCH_ROWS, FLUSH_SECONDS after the first, or a marker, whichever is first."""
        batch: list[AuditEvent] = []
        item = self._queue.get()
        deadline = time.monotonic() + FLUSH_SECONDS
        while isinstance(item, AuditEvent):
            batch.append(item)
            if len(batch) >= BATCH_ROWS:
                return batch, None
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return batch, None
        return batch, item

    def _write(self, batch: list[AuditEvent]) -> None:
        delay = 0.1
        while True:
            try:
                insert_events(self._engine, batch)
                return
            except (sa.exc.OperationalError, sa.exc.InterfaceError) as error:
                # The database cannot be reached: keep the batch and try again, until shutdown gives up.
                if time.monotonic() >= self._give_up_at:
                    log.error("audit: database unreachable at shutdown; %d audit rows lost: %s", len(batch), error)
                    return
                log.warning("audit: database unreachable, retrying %d rows in %.1f s: %s", len(batch), delay, error)
                self._report_dropped()
                time.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)
            except sa.exc.SQLAlchemyError:
                # The database refused something in the batch: write the rows one by one, losing only the bad.
                self._write_one_by_one(batch)
                return

    def _write_one_by_one(self, batch: list[AuditEvent]) -> None:
        for event in batch:
            try:
                insert_events(self._engine, [event])
            except sa.exc.SQLAlchemyError:
                log.exception("audit: row of request %s refused by the database and lost", event.request_id)

    def _report_dropped(self) -> None:
        with self._dropped_lock:
            dropped, self._dropped = self._dropped, 0
        if dropped:
            log.error("audit: queue full (%d rows waiting for the database); %d audit rows dropped",
                      QUEUE_ROWS, dropped)
