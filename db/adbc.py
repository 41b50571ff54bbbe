"""ADBC connections to an engine's PostgreSQL database: Arrow in and out with no Python object per row.

psycopg hands `COPY` output to Python one row message at a time (about 2.5 µs a row) and takes CSV text in;
the ADBC driver (`adbc-driver-postgresql`, libpq underneath) speaks PostgreSQL's binary COPY and builds Arrow
record batches in C. Its connections are its own sessions, not SQLAlchemy's: what they read is what is committed,
and what they write is committed on their own. The bulk paths use them where that is what they need: the
columnar reads (each one statement) and the staging of rows that a transaction of the engine then applies.

Connections are pooled per engine (SQLAlchemy's QueuePool over the driver's DB-API connect), rolled back when
returned, and closed when the engine is disposed.
"""

import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from db.continued_reads import CAPACITY as PARKED_READS_CAPACITY

_DIALECT = postgresql.psycopg.dialect(paramstyle="numeric_dollar")
# Templates are compiled with numbered placeholders and no casts (psycopg's dialect writes `$1::VARCHAR`); a
# parameter used twice keeps its number.
_TEMPLATE_DIALECT = postgresql.psycopg2.dialect(paramstyle="numeric_dollar")
_PLACEHOLDER = re.compile(r"\$(\d+)")
_POOL_SIZE = 4

_pools: "weakref.WeakKeyDictionary[sa.Engine, sa.pool.QueuePool]" = weakref.WeakKeyDictionary()
_pools_guard = threading.Lock()


def _uri(engine: sa.Engine) -> str:
    """libpq's URI of the engine's database (the driver name dropped), with the engine's session time zone."""
    url = engine.url.set(drivername="postgresql").update_query_dict(
        {"options": "-ctimezone=UTC", "connect_timeout": "3"})
    return url.render_as_string(hide_password=False)


def _pool(engine: sa.Engine) -> sa.pool.QueuePool:
    with _pools_guard:
        if (pool := _pools.get(engine)) is None:
            # Imported here, on first use: its DB-API module loads pyarrow.dataset and with it pandas (0.3 s), which
            # a `pia admin` command or a DuckDB server never needs.
            import adbc_driver_postgresql.dbapi as adbc_dbapi

            uri = _uri(engine)
            # Reads parked between pages hold a connection each (db.continued_reads): room for them beyond the rest.
            pool = sa.pool.QueuePool(lambda: adbc_dbapi.connect(uri), pool_size=_POOL_SIZE,
                                     max_overflow=_POOL_SIZE + PARKED_READS_CAPACITY, reset_on_return="rollback")
            _pools[engine] = pool
            sa.event.listen(engine, "engine_disposed", lambda _engine: pool.dispose())
    return pool


@contextmanager
def adbc_connection(engine: sa.Engine) -> Iterator[Any]:
    """A pooled ADBC DB-API connection to the engine's PostgreSQL database; rolled back when given back, and
    dropped from the pool when the block raised (the session may be unusable)."""
    fairy = _pool(engine).connect()
    try:
        yield fairy.dbapi_connection
    except BaseException:
        fairy.invalidate()
        raise
    finally:
        fairy.close()


def inlined(statement: sa.Executable) -> str:
    """The statement's SQL with its values written in as literals (SQLAlchemy quotes them).

    The driver streams a result through `COPY (query) TO STDOUT` only for a statement without bound parameters;
    with parameters it reads the whole result before handing over the first batch.
    """
    return str(statement.compile(dialect=_DIALECT, compile_kwargs={"literal_binds": True}))


class InlinedTemplate:
    """A statement compiled once, its bound parameters written in as literals at each use, as `inlined` writes them.

    For a statement read again and again with other values (an Arrow page: the tenant, the filters, the key to
    read after): building and compiling it with SQLAlchemy costs more than PostgreSQL takes to run it (about
    5 ms against 3 ms for a page of 5,000 forecasts). Build the statement once with `sa.bindparam(name)` where the
    values go; `render` writes them in, each with the literal processor of its bound parameter's type. Values
    the statement was built with (a LIMIT) stay as built unless given.
    """

    def __init__(self, statement: sa.Executable) -> None:
        compiled = statement.compile(dialect=_TEMPLATE_DIALECT)
        pieces = _PLACEHOLDER.split(compiled.string)
        names = compiled.positiontup or []
        self._texts = pieces[0::2]
        self._names = [names[int(number) - 1] for number in pieces[1::2]]
        self._built = dict(compiled.params)
        self._literals: dict[str, Callable[[Any], str]] = {}
        for name in set(self._names):
            kind = compiled.binds[name].type
            literal = kind.dialect_impl(_DIALECT).literal_processor(_DIALECT)
            if literal is None:
                raise TypeError(f"no literal for the parameter {name} ({kind})")
            self._literals[name] = literal

    def render(self, values: Mapping[str, Any]) -> str:
        """The statement's SQL with these values (and those it was built with) as literals."""
        given = {**self._built, **values}
        sql = [self._texts[0]]
        for name, text in zip(self._names, self._texts[1:], strict=True):
            if (value := given[name]) is None:
                raise ValueError(f"no value for the parameter {name}")
            sql += (self._literals[name](value), text)
        return "".join(sql)
