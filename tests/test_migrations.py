"""`pia db upgrade` creates the schema and migrates it again without losing data."""

import sqlalchemy as sa
from alembic import command

from settings import Settings
from store.engine import create_engine
from store.migrate import _config, current_revision, head_revision, upgrade
from store.schema import store_assortment_lines
from store.tenants import create_tenant, get_tenant


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


def test_rows_written_under_an_older_revision_survive_the_upgrade(tmp_path, backend, postgres_url) -> None:
    """Migrate a database that holds data at revision 0001 forward to head."""
    if backend == "postgresql":
        admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text("DROP SCHEMA IF EXISTS migration_probe CASCADE"))
            conn.execute(sa.text("CREATE SCHEMA migration_probe"))
        engine = sa.create_engine(postgres_url, connect_args={"options": "-c search_path=migration_probe"})
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
