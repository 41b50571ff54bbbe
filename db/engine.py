"""Engines for the embedded DuckDB file and for PostgreSQL."""

import threading
from pathlib import Path
from typing import Any

import duckdb
import duckdb_engine
import sqlalchemy as sa
from cachetools import LRUCache, cached

from settings import Settings


class Commits:
    """How many transactions changed the DuckDB file, counted by its engine in this process. The process that writes
    the file holds it alone (DuckDB's lock), so a count that has not moved means that nothing in it changed: the
    in-process roles' polls (db.polls) skip their queries meanwhile."""

    def __init__(self) -> None:
        self.count = 0  # only ever increased, one commit at a time (_lock); read without it
        self._lock = threading.Lock()

    def changed(self) -> None:
        with self._lock:
            self.count += 1


_QUIET = "pia.quiet_commit"
# Per DuckDB file: engines of one process on one file (the tests make several) share its database and its count.
_COMMITS_OF_FILE: dict[str, Commits] = {}
_COMMITS_LOCK = threading.Lock()
_CONNECT_LOCK = threading.Lock()


def _commits_of_file(database: str | None) -> Commits | None:
    """None for an in-memory database (each connection has its own): its pollers always ask."""
    if not database or database == ":memory:":
        return None
    with _COMMITS_LOCK:
        return _COMMITS_OF_FILE.setdefault(str(Path(database).resolve()), Commits())


class CachedDuckDBDialect(duckdb_engine.Dialect):
    """duckdb_engine's dialect with SQLAlchemy's cache of compiled statements on. duckdb_engine leaves it off by not
    declaring its compiler cache-safe; it compiles statements as PostgreSQL's dialect does (which caches), adding
    only type names for DDL. Without the cache every statement is compiled again at every execution: a sixth of the
    CPU of the DuckDB stock model test (see the README's Decisions). Data statements run from DuckDB's kept parse
    of their text (kept_parse). Its engine counts the commits (`commits`), after they are done, so that a poll that
    read the count before its query and finds it unchanged knows its query saw every change."""

    supports_statement_cache = True

    commits = None  # create_engine gives each engine its file's Commits

    def connect(self, *cargs: Any, **cparams: Any) -> Any:
        # DuckDB 2.0's Python instance cache races when several threads open a file that no connection holds yet:
        # one of them fails ("Unique file handle conflict ... already attached"), or gets a connection lacking the
        # python_arrow_scan function that `register` needs (seen in CI: a staged table failed to register). One
        # connect at a time per process; the pool opens few.
        with _CONNECT_LOCK:
            return super().connect(*cargs, **cparams)

    def do_commit(self, dbapi_connection: Any) -> None:
        super().do_commit(dbapi_connection)
        if not _quiet(dbapi_connection) and self.commits is not None:
            self.commits.changed()

    def do_rollback(self, dbapi_connection: Any) -> None:
        _quiet(dbapi_connection)
        super().do_rollback(dbapi_connection)

    def do_execute(self, cursor: Any, statement: str, parameters: Any, context: Any = None) -> None:
        parsed = duckdb_statement(cursor.connection, statement)
        if isinstance(parsed, str):
            super().do_execute(cursor, statement, parameters, context)
        else:  # cursor.connection passes execute on to the DuckDB connection the cursor reads its results from
            cursor.connection.execute(parsed, parameters)


def _quiet(dbapi_connection: Any) -> bool:
    """Whether quiet_commit marked the connection's transaction; the mark is cleared."""
    try:
        return dbapi_connection.info.pop(_QUIET, False)
    except NotImplementedError:  # the pool's first rollback of a new connection, on a proxy without `info`
        return False


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
        engine = sa.create_engine(url.set(drivername="duckdb+cached"),
                                  connect_args={"config": {"checkpoint_threshold": "256MB"}})
        engine.dialect.commits = _commits_of_file(url.database)
        return engine
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


def commits_of(engine: sa.Engine) -> Commits | None:
    """The count of the engine's commits that changed something pollers read: DuckDB's only (a PostgreSQL database
    is written by other processes too)."""
    return getattr(engine.dialect, "commits", None)


def quiet_commit(conn: sa.Connection) -> None:
    """The connection's transaction changes nothing the in-process roles poll for (audit rows): its commit leaves
    the count alone, so that a server's requests, each leaving an audit row, do not set the roles polling."""
    if commits_of(conn.engine) is not None:
        conn.info[_QUIET] = True
