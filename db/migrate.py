"""`pia db upgrade`: create or migrate the schema with Alembic, keeping the data."""

from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.ddl.impl import DefaultImpl
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

MIGRATIONS = Path(__file__).parent / "migrations"


class AlembicDuckDBImpl(DefaultImpl):
    """Lets Alembic migrate DuckDB, which it does not know by itself. Defined here, beside every use of Alembic,
    so that the processes that never migrate (workers, bridges, CLI commands) do not import it (about 0.3 s)."""

    __dialect__ = "duckdb"
    transactional_ddl = True


def _config(connection: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def upgrade(engine: sa.Engine) -> None:
    with engine.begin() as connection:
        command.upgrade(_config(connection), "head")


def current_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()


def altering_indexed_table(table: str, indexes: dict[str, list[str]], change: Callable[[], None]) -> None:
    """Run a migration's `change` to `table` (adding or dropping a column). DuckDB refuses to alter a table that
    has an index, so there its `indexes` (name → columns) are dropped around the change and made again."""
    from alembic import op  # only inside a migration's context

    on_duckdb = op.get_bind().dialect.name == "duckdb"
    if on_duckdb:
        for name in indexes:
            op.drop_index(name, table_name=table)
    change()
    if on_duckdb:
        for name, columns in indexes.items():
            op.create_index(name, table, columns)
