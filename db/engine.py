"""Engines for the embedded DuckDB file and for PostgreSQL."""

import sqlalchemy as sa
from alembic.ddl.impl import DefaultImpl

from settings import Settings


class AlembicDuckDBImpl(DefaultImpl):
    """Lets Alembic migrate DuckDB, which it does not know by itself."""

    __dialect__ = "duckdb"
    transactional_ddl = True


def create_engine(settings: Settings) -> sa.Engine:
    url = sa.make_url(settings.resolved_database_url)
    if url.get_backend_name() == "duckdb":
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        # Without the ICU extension (not bundled) DuckDB keeps TIMESTAMPTZ in UTC, as we want.
        # Checkpoints after every 16 MB of WAL stalled bulk batch applies for seconds; fewer, larger ones don't.
        return sa.create_engine(url, connect_args={"config": {"checkpoint_threshold": "256MB"}})
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
