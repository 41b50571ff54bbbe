"""`pia db upgrade` creates the schema and migrates it again without losing data."""

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from db.engine import create_engine
from db.migrate import _config, current_revision, head_revision, upgrade
from db.schema import event_outbox, metadata, store_assortment_lines
from db.tenants import create_tenant, get_tenant
from settings import Settings


def test_upgrade_creates_then_keeps_data(settings, engine) -> None:
    engine = create_engine(settings)  # a second engine on the session database, upgraded once already
    tenant_id = create_tenant(engine, "kept", is_test=False)
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    assert get_tenant(engine, tenant_id).name == "kept"


def test_upgrade_from_empty_duckdb(tmp_path) -> None:
    engine = create_engine(Settings(data_dir=tmp_path))
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    assert "api_clients" in sa.inspect(engine).get_table_names()


def _empty_postgres_schema(postgres_url: str, name: str) -> sa.Engine:
    """An engine whose tables go to a new, empty schema of the session database."""
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))
        conn.execute(sa.text(f"CREATE SCHEMA {name}"))
    admin.dispose()
    return sa.create_engine(postgres_url, connect_args={"options": f"-c search_path={name}"})


def test_rows_written_under_an_older_revision_survive_the_upgrade(tmp_path, backend, postgres_url) -> None:
    """Migrate a database that holds data at revision 0001 forward to head."""
    if backend == "postgresql":
        engine = _empty_postgres_schema(postgres_url, "migration_probe")
    else:
        engine = create_engine(Settings(data_dir=tmp_path))
    with engine.begin() as conn:
        command.upgrade(_config(conn), "0001")
    tenant_id = create_tenant(engine, "from 0001", is_test=True)
    upgrade(engine)
    assert current_revision(engine) == head_revision() != "0001"
    assert get_tenant(engine, tenant_id).name == "from 0001"
    with engine.connect() as conn:  # the column 0002 added is there (reflection is broken on duckdb-engine)
        assert conn.execute(sa.select(store_assortment_lines.c.generated_at)).all() == []


def test_the_migrated_postgresql_schema_is_schema_py(postgres_url) -> None:
    """Alembic's comparison of the migrated schema with db/schema.py (tables, columns, types, indexes) finds
    nothing, and the outbox's columns carry the collations schema.py gives them, which that comparison skips."""
    engine = _empty_postgres_schema(postgres_url, "schema_probe")
    upgrade(engine)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata) == []
        collations = dict(conn.execute(sa.text(
            "SELECT column_name, collation_name FROM information_schema.columns "
            "WHERE table_schema = 'schema_probe' AND table_name = 'event_outbox'")).all())
    declared = {column.name: getattr(column.type.dialect_impl(engine.dialect), "collation", None)
                for column in event_outbox.columns}
    assert collations == declared
    assert collations["event_id"] == "C"


def test_the_cheaper_outbox_indexes_migrate_down_and_up_again(tmp_path, backend, postgres_url) -> None:
    """0011 undone brings back the outbox's index on (tenant, store, event id) and keeps the rows; done again, the
    rows are still there."""
    if backend == "postgresql":
        engine = _empty_postgres_schema(postgres_url, "outbox_probe")
    else:
        engine = create_engine(Settings(data_dir=tmp_path))
    upgrade(engine)
    tenant_id = create_tenant(engine, "outbox", is_test=True)
    row = {"event_id": "01900000-0000-7000-8000-000000000001", "tenant_id": tenant_id, "ecom_store_id": tenant_id,
           "subject": "ProductUpdated", "entity_id": None, "datetime": sa.func.now()}
    with engine.begin() as conn:
        conn.execute(event_outbox.insert().values(row))
        command.downgrade(_config(conn), "0010")
    with engine.begin() as conn:
        indexes = conn.execute(sa.text("SELECT index_name FROM duckdb_indexes()" if backend == "duckdb" else
                                       "SELECT indexname FROM pg_indexes WHERE schemaname = 'outbox_probe' "
                                       "AND tablename = 'event_outbox'")).scalars().all()
        assert "ix_event_outbox_tenant_id_ecom_store_id_event_id" in indexes
        assert "ix_event_outbox_dead_letters" not in indexes
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        assert conn.execute(sa.select(event_outbox.c.event_id)).scalars().all() == [row["event_id"]]
