"""Which database errors are worth another try: the one answer every retrying caller (the pipeline worker, the
Kafka relay) shares."""

import adbc_driver_manager as adbc_errors
import duckdb
import psycopg
import sqlalchemy as sa

# The drivers' own classes too: the bulk paths talk to them directly (COPY, Arrow views), unwrapped by SQLAlchemy.
_TRANSIENT = (sa.exc.OperationalError, sa.exc.TimeoutError, psycopg.OperationalError, duckdb.OperationalError,
              adbc_errors.OperationalError)


def is_transient(error: BaseException, *also: type[BaseException]) -> bool:
    """Whether trying again can succeed: OperationalError covers a lost connection, lock and statement timeouts,
    serialization failures and deadlocks (psycopg, ADBC) and write conflicts (DuckDB); `also` names the caller's
    own transient errors."""
    return isinstance(error, _TRANSIENT + also) or (
        isinstance(error, sa.exc.DBAPIError) and error.connection_invalidated)
