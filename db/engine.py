"""Engines for the embedded DuckDB file and for PostgreSQL."""

import threading
from typing import Any

import duckdb
import duckdb_engine
import sqlalchemy as sa
from alembic.ddl.impl import DefaultImpl
from cachetools import LRUCache, cached

from settings import Settings


class AlembicDuckDBImpl(DefaultImpl):
    """Lets Alembic migrate DuckDB, which it does not know by itself."""

    __dialect__ = "duckdb"
    transactional_ddl = True


class CachedDuckDBDialect(duckdb_engine.Dialect):
    """duckdb_engine's dialect with SQLAlchemy's cache of compiled statements on. duckdb_engine leaves it off by not
    declaring its compiler cache-safe; it compiles statements as PostgreSQL's dialect does (which caches), adding
    only type names for DDL. Without the cache every statement is compiled again at every execution: a sixth of the
    CPU of the DuckDB stock model test (see the README's Decisions). Data statements run from DuckDB's kept parse
    of their text (kept_parse)."""

    supports_statement_cache = True

    def do_execute(self, cursor: Any, statement: str, parameters: Any, context: Any = None) -> None:
        parsed = duckdb_statement(cursor.connection, statement)
        if isinstance(parsed, str):
            super().do_execute(cursor, statement, parameters, context)
        else:  # cursor.connection passes execute on to the DuckDB connection the cursor reads its results from
            cursor.connection.execute(parsed, parameters)


_KEPT_STATEMENT_TYPES = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"})
_KEPT_TEXTS = 512  # as many as SQLAlchemy's cache of compiled statements keeps


@cached(LRUCache(_KEPT_TEXTS), key=lambda connection, sql: sql, lock=threading.Lock(), info=True)
def kept_parse(connection: Any, sql: str) -> "duckdb.Statement | None":
    """DuckDB's parse of sql (parsed on connection the first time), kept; None for text that takes the driver's
    path. DuckDB parses a statement's text at every execution, and its parser (PEG, since 2.0) is a quarter of the
    CPU of a point query (800 against 600 µs with the parse kept) and 7 ms of a 6 KB page query. A parsed statement
    runs on any connection; DuckDB binds and plans it afresh each time, so what it reads is never stale. Only single
    data statements are kept: transaction control and DDL take the driver's own path."""
    try:
        statements = connection.extract_statements(sql)
    except duckdb.Error:
        return None  # executed as text, for DuckDB's own error
    if len(statements) == 1 and statements[0].type.name in _KEPT_STATEMENT_TYPES:
        return statements[0]
    return None


def duckdb_statement(connection: Any, sql: str) -> "duckdb.Statement | str":
    """What to hand a DuckDB connection's execute() or sql() for this text: its kept parse, else the text."""
    parsed = kept_parse(connection, sql)
    return sql if parsed is None else parsed


sa.dialects.registry.register("duckdb.cached", __name__, CachedDuckDBDialect.__name__)


def create_engine(settings: Settings) -> sa.Engine:
    url = sa.make_url(settings.resolved_database_url)
    if url.get_backend_name() == "duckdb":
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        # Without the ICU extension (not bundled) DuckDB keeps TIMESTAMPTZ in UTC, as we want.
        # Checkpoints after every 16 MB of WAL stalled bulk batch applies for seconds; fewer, larger ones don't.
        return sa.create_engine(url.set(drivername="duckdb+cached"),
                                connect_args={"config": {"checkpoint_threshold": "256MB"}})
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return sa.create_engine(
        url,
        pool_pre_ping=True,
        pool_size=10,
        # A database that cannot be reached fails fast, so /healthcheck answers 503 promptly.
        connect_args={"connect_timeout": 3, "options": "-c timezone=UTC"},
    )


def is_duckdb(engine: sa.Engine) -> bool:
    return engine.dialect.name == "duckdb"
