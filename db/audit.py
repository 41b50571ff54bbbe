"""The audit trail: one row per authenticated request, written in batches off the request path."""

import logging
import threading
import time
from collections import deque
from datetime import datetime
from typing import NamedTuple

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

from db.bulk import append_arrow
from db.engine import quiet_commit
from db.ids import new_id
from db.schema import audit_events

log = logging.getLogger(__name__)

# The writer wakes this often, or as soon as a batch of this many rows waits, and writes what is waiting. Each write
# costs the server far more than its rows (the writer thread and the event loop take turns at the interpreter while
# it runs): every 0.2 s or 500 rows cost 15–37 µs a request more than every second or 5,000 rows in
# benchmarks.request_overhead (2026-11-28), for rows that now appear up to a second after the answer.
FLUSH_SECONDS = 1.0
BATCH_ROWS = 5_000
# Rows held while the database cannot be reached (about 1 KB each); beyond it new rows are dropped, loudly.
QUEUE_ROWS = 20_000
# Retries of a batch the database could not take back off up to this interval.
MAX_RETRY_SECONDS = 5.0
# How long stopping may keep retrying an unreachable database before the rows still held are given up.
CLOSE_SECONDS = 10.0
PATH_CHARACTERS = audit_events.c.path.type.length


class AuditEvent(NamedTuple):
    """What a request leaves for the audit: a tuple, the cheapest record to build on the request path; its row id
    is given when it is written."""

    tenant_id: str
    client_id: str
    token_id: str
    request_id: str
    method: str
    path: str
    status: int
    duration_ms: float
    time: datetime


_ARROW_TYPES = {"status": pa.int32(), "duration_ms": pa.float64(), "time": pa.timestamp("us", tz="UTC")}


def insert_events(engine: sa.Engine, events: list[AuditEvent]) -> None:
    """The events in one transaction and one statement: Arrow columns built at once, which DuckDB reads in place
    and PostgreSQL takes by COPY (db.bulk.append_arrow)."""
    columns = {name: pa.array(values, _ARROW_TYPES.get(name, pa.string()))
               for name, values in zip(AuditEvent._fields, zip(*events, strict=True), strict=True)}
    # A path is as long as the client made it, and may carry a NUL (%00), which PostgreSQL text refuses.
    columns["path"] = pc.replace_substring(pc.utf8_slice_codeunits(columns["path"], 0, PATH_CHARACTERS),
                                           "\x00", "\N{REPLACEMENT CHARACTER}")
    rows = pa.table({"id": pa.array([new_id() for _ in events], pa.string()), **columns})
    with engine.begin() as conn:
        quiet_commit(conn)  # audit rows are no work for the in-process roles' polls
        append_arrow(conn, audit_events, rows)


_DATABASE_ERRORS = (sa.exc.SQLAlchemyError, psycopg.Error)


def _unreachable(error: Exception) -> bool:
    """Whether the database could not be reached (as against refusing what it was sent). COPY runs on psycopg's own
    cursor, so its errors come unwrapped by SQLAlchemy."""
    return isinstance(error, sa.exc.OperationalError | sa.exc.InterfaceError
                      | psycopg.OperationalError | psycopg.InterfaceError)


def client_events(engine: sa.Engine, tenant_id: str, client_id: str, limit: int) -> list[sa.Row]:
    """The newest events of one client, newest first."""
    with engine.connect() as conn:
        return list(conn.execute(
            sa.select(audit_events)
            .where(audit_events.c.tenant_id == tenant_id, audit_events.c.client_id == client_id)
            .order_by(audit_events.c.time.desc(), audit_events.c.id.desc()).limit(limit)))


class _Marker:
    """Queued behind the rows to flush: reached once they are written (or given up)."""

    def __init__(self, stop: bool = False) -> None:
        self.stop = stop
        self.reached = threading.Event()


class AuditWriter:
    """Takes audit events from requests without waiting and writes them in batches from a thread of its own.

    A request only appends its event to a queue; the writer wakes every FLUSH_SECONDS (or when BATCH_ROWS
    wait) and writes everything queued, BATCH_ROWS per INSERT. While the database cannot be reached it keeps
    its batch and retries with backoff; requests go on queueing up to QUEUE_ROWS rows, after which new rows
    are dropped and their count is logged as an error at every retry. `close` writes what is queued
    (retrying an unreachable database for at most CLOSE_SECONDS) and stops.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._flush_seconds, self._batch_rows, self._queue_rows = FLUSH_SECONDS, BATCH_ROWS, QUEUE_ROWS
        # One producer (the event loop) and one consumer (the writer): deque appends and pops are atomic.
        self._queue: deque[AuditEvent | _Marker] = deque()
        self._wake = threading.Event()
        self._dropped = 0
        self._dropped_lock = threading.Lock()
        self._give_up_at = float("inf")  # set by close
        self._gave_up = False
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, event: AuditEvent) -> None:
        """Never blocks: a request's answer does not wait on its audit row."""
        queued = len(self._queue)
        if queued >= self._queue_rows:
            with self._dropped_lock:
                self._dropped += 1  # reported by the writer
            return
        self._queue.append(event)
        if queued + 1 == self._batch_rows:
            self._wake.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event submitted before this call is written; False if that took too long."""
        return self._send(_Marker(), timeout)

    def close(self) -> None:
        """Write what is queued and stop the writer thread."""
        if self._thread.is_alive():
            self._give_up_at = time.monotonic() + CLOSE_SECONDS
            self._send(_Marker(stop=True), None)
            self._thread.join()

    def _send(self, marker: _Marker, timeout: float | None) -> bool:
        self._queue.append(marker)
        self._wake.set()
        return marker.reached.wait(timeout)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._flush_seconds)
            self._wake.clear()
            batch: list[AuditEvent] = []
            while self._queue:
                item = self._queue.popleft()
                if isinstance(item, AuditEvent):
                    batch.append(item)
                    if len(batch) < self._batch_rows:
                        continue
                self._write(batch)
                batch = []
                if isinstance(item, _Marker):
                    item.reached.set()
                    if item.stop:
                        self._report_dropped()
                        return
            self._write(batch)
            self._report_dropped()

    def _write(self, batch: list[AuditEvent]) -> None:
        delay = 0.1
        while batch:
            if self._gave_up:  # at shutdown, once: the rows still queued are not tried one batch at a time
                log.error("audit: database unreachable at shutdown; %d audit rows lost", len(batch))
                return
            try:
                insert_events(self._engine, batch)
                return
            except _DATABASE_ERRORS as error:
                if not _unreachable(error):
                    # The database refused something in the batch: write the rows one by one, losing only the bad.
                    self._write_one_by_one(batch)
                    return
                # The database cannot be reached: keep the batch and try again, until shutdown gives up.
                self._gave_up = time.monotonic() >= self._give_up_at
                if self._gave_up:
                    continue  # to the loss report above
                log.warning("audit: database unreachable, retrying %d rows in %.1f s: %s", len(batch), delay, error)
                self._report_dropped()
                time.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)

    def _write_one_by_one(self, batch: list[AuditEvent]) -> None:
        for event in batch:
            try:
                insert_events(self._engine, [event])
            except _DATABASE_ERRORS:
                log.exception("audit: row of request %s refused by the database and lost", event.request_id)

    def _report_dropped(self) -> None:
        with self._dropped_lock:
            dropped, self._dropped = self._dropped, 0
        if dropped:
            log.error("audit: queue full (%d rows waiting for the database); %d audit rows dropped",
                      self._queue_rows, dropped)
