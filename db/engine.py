"""Engines for the embedded DuckDB file and for PostgreSQL."""

import duckdb_engine
import sqlalchemy as sa
from alembic.ddl.impl import DefaultImpl

from settings import Settings


class AlembicDuckDBImpl(DefaultImpl):
    """Lets Alembic migrate DuckDB, which it does not know by itself."""

    __dialect__ = "duckdb"
    transactional_ddl = True


class CachedDuckDBDialect(duckdb_engine.Dialect):
    """duckdb_engine's dialect with SQLAlchemy's cache of compiled statements on. duckdb_engine leaves it off by not
    declaring its compiler cache-safe; it compiles statements as PostgreSQL's dialect does (which caches), adding
    only type names for DDL. Without the cache every statement is compiled again at every execution: a sixth of the
    CPU of the DuckDB stock model test (see the README's Decisions)."""

    supports_statement_cache = True


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
