"""`pia db upgrade` creates the schema and migrates it again without losing data."""

import sqlalchemy as sa

from store.config import Settings
from store.engine import create_engine
from store.migrate import current_revision, head_revision, upgrade
from store.tenants import create_tenant, get_tenant


def test_upgrade_creates_then_keeps_data(settings) -> None:
    engine = create_engine(settings)  # the session's database, already upgraded once
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
