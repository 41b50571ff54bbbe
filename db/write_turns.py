"""Writes that take turns and are tried again after losing to a concurrent writer, on both backends.

DuckDB has no row locks and fails the later of two conflicting transactions instead, so this process's DuckDB
writers take turns on one lock, and a write that lost to a writer elsewhere is tried again a few times. On
PostgreSQL, where rows are locked (`db.stock.for_update`), a write is tried again when it lost a first insert of a
row to a concurrent one (UniqueViolation). Every writer of shared rows runs its transaction through
`write_with_retries` or `transaction_with_retries`.
"""

import threading
from collections.abc import Callable
from typing import TypeVar

import duckdb
import psycopg
import sqlalchemy as sa

from db.engine import is_duckdb
from rules.retry import RetryPolicy

T = TypeVar("T")

ATTEMPTS = 5
_RETRY_BASE_SECONDS = 0.02
_WRITE_RETRY = RetryPolicy(ATTEMPTS, _RETRY_BASE_SECONDS, max_seconds=_RETRY_BASE_SECONDS * 2 ** ATTEMPTS)
# One per process: the embedded DuckDB file has one owning process, which then takes turns here.
_DUCKDB_WRITES = threading.Lock()


def _is_conflict(error: sa.exc.DBAPIError) -> bool:
    """A write that lost to a concurrent one: DuckDB's transaction conflict, or on PostgreSQL two first
    adjustments of a row both inserting it (the loser finds the row, locked, when it tries again)."""
    return isinstance(error.orig, (duckdb.TransactionException, psycopg.errors.UniqueViolation))


def write_with_retries(engine: sa.Engine, attempt: Callable[[], T]) -> T:
    """Run `attempt` (its own transaction), again after it lost to a concurrent writer; on DuckDB one at a time."""

    def once() -> T:
        if is_duckdb(engine):
            with _DUCKDB_WRITES:
                return attempt()
        return attempt()

    return _WRITE_RETRY.call(once, lambda error: isinstance(error, sa.exc.DBAPIError) and _is_conflict(error))


def transaction_with_retries(engine: sa.Engine, work: Callable[[sa.Connection], T]) -> T:
    """`work` in a transaction of its own, run as write_with_retries runs an attempt."""

    def attempt() -> T:
        with engine.begin() as conn:
            return work(conn)

    return write_with_retries(engine, attempt)
