"""`pia db upgrade` creates the schema and migrates it again without losing data."""

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from db.engine import create_engine
from db.held_quantities import as_decimals, stored_value
from db.ids import new_id
from db.migrate import _config, current_revision, head_revision, upgrade
from db.schema import (
    click_and_collect_lines,
    click_and_collect_reservations,
    event_outbox,
    metadata,
    order_lines,
    orders,
    stock_levels,
    stock_reservations,
    store_assortment_lines,
)
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


def _engine_at(revision: str, tmp_path, backend: str, postgres_url: str, schema: str) -> sa.Engine:
    if backend == "postgresql":
        engine = _empty_postgres_schema(postgres_url, schema)
    else:
        engine = create_engine(Settings(data_dir=tmp_path))
    with engine.begin() as conn:
        command.upgrade(_config(conn), revision)
    return engine


def test_an_upgrade_turns_what_is_reserved_into_reservation_rows(tmp_path, backend, postgres_url) -> None:
    """A database at 0013 as the load-overwrite defect could leave it (a reserved of -3 where an order holds 1, a
    document's 4 where an order holds 2) with an OPEN order, a RECEIVED one and a parked cart: 0014 gives each held
    unit its ACTIVE row and every stock level the sum of its rows, then refuses negative stock."""
    engine = _engine_at("0013", tmp_path, backend, postgres_url, "reservations_probe")
    tenant, warehouse, store, customer = new_id(), new_id(), new_id(), new_id()
    a, b, c = new_id(), new_id(), new_id()
    opened, waiting, cart = new_id(), new_id(), new_id()
    line_a, line_b, line_waiting, cart_line = new_id(), new_id(), new_id(), new_id()
    ordered, parked = datetime(2026, 11, 20, 9, tzinfo=UTC), datetime(2026, 11, 21, 10, tzinfo=UTC)

    def order(order_id: str, number: str, status: str, warehouse_id: str | None) -> dict:
        return {"id": order_id, "tenant_id": tenant, "ecom_store_id": new_id(), "number": number,
                "external_order_id": number, "external_order_number": number, "customer_id": customer,
                "status": status, "order_date": ordered, "delivery_date": date(2026, 11, 22),
                "currency_iso_code": "NOK", "delivery_address": "{}", "gross_amount": 10, "vat_amount": 2,
                "warehouse_id": warehouse_id, "modified_time": ordered}

    def line(line_id: str, order_id: str, sku_id: str, quantity: int, reserved: int) -> dict:
        return {"id": line_id, "tenant_id": tenant, "order_id": order_id, "line_number": 1, "sku_id": sku_id,
                "sku_number": "N", "product_name": "P", "quantity": quantity, "net_unit_price": 5, "vat_rate": 25,
                "price_type": "REGULAR", "gross_amount": 5, "vat_amount": 1, "reserved_quantity": reserved,
                "delivered_quantity": 0, "returned_quantity": 0}

    with engine.begin() as conn:
        conn.execute(stock_levels.insert(), [
            {"tenant_id": tenant, "location_id": warehouse, "sku_id": a, "on_hand": 10, "reserved": -3,
             "modified_time": ordered},
            {"tenant_id": tenant, "location_id": warehouse, "sku_id": b, "on_hand": 5, "reserved": 4,
             "modified_time": ordered},
            {"tenant_id": tenant, "location_id": store, "sku_id": c, "on_hand": 3, "reserved": 0,
             "modified_time": ordered}])
        conn.execute(orders.insert(), [order(opened, "100001", "OPEN", warehouse),
                                       order(waiting, "100002", "RECEIVED", None)])
        conn.execute(order_lines.insert(), [line(line_a, opened, a, 1, 1), line(line_b, opened, b, 3, 2),
                                            line(line_waiting, waiting, a, 2, 0)])
        conn.execute(click_and_collect_reservations.insert().values(
            id=cart, tenant_id=tenant, ecom_store_id=new_id(), cart_id=new_id(), reservation_name="Kari",
            retail_store_id=store, created_time=parked))
        conn.execute(click_and_collect_lines.insert().values(
            id=cart_line, tenant_id=tenant, reservation_id=cart, line_number=0, sku_id=c, quantity=2,
            location_id=store, reserved_from_warehouse=False))

    upgrade(engine)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(stock_reservations.c.owner_type, stock_reservations.c.owner_id,
                                      stock_reservations.c.location_id, stock_reservations.c.sku_id,
                                      stock_reservations.c.quantity, stock_reservations.c.state,
                                      stock_reservations.c.created_time, stock_reservations.c.ended_time)
                            .where(stock_reservations.c.tenant_id == tenant)).all()
        levels = {row.sku_id: row.reserved for row in conn.execute(sa.select(stock_levels))}
        state = conn.scalar(sa.select(click_and_collect_reservations.c.state))
    as_utc = [(*row[:6], row.created_time.replace(tzinfo=UTC), row.ended_time) for row in rows]
    assert sorted(as_utc) == sorted([
        ("ORDER_LINE", line_a, warehouse, a, Decimal(1), "ACTIVE", ordered, None),
        ("ORDER_LINE", line_b, warehouse, b, Decimal(2), "ACTIVE", ordered, None),
        ("CART_LINE", cart_line, store, c, Decimal(2), "ACTIVE", parked, None)])
    assert levels == {a: 1, b: 2, c: 2}
    assert state == "ACTIVE"
    for column in ("on_hand", "reserved"):
        with pytest.raises(sa.exc.DBAPIError), engine.begin() as conn:
            conn.execute(stock_levels.update().where(stock_levels.c.sku_id == a).values({column: -1}))

    with engine.begin() as conn:  # down and up again: the rows are made anew from the same figures
        command.downgrade(_config(conn), "0013")
    upgrade(engine)
    with engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(stock_reservations)) == 3
        assert {row.sku_id: row.reserved for row in conn.execute(sa.select(stock_levels))} == {a: 1, b: 2, c: 2}
    engine.dispose()


def test_the_database_refuses_negative_stock(engine) -> None:
    """The CHECKs of schema.py, as the session's migrated database has them, on both backends."""
    tenant = new_id()
    with engine.begin() as conn:
        conn.execute(stock_levels.insert().values(tenant_id=tenant, location_id=new_id(), sku_id=new_id(),
                                                  on_hand=1, reserved=0, modified_time=sa.func.now()))
    for values in ({"on_hand": -1}, {"reserved": -1}, {"reserved": sa.column("reserved") - 1}):
        with pytest.raises(sa.exc.DBAPIError, match="(?i)check"), engine.begin() as conn:
            conn.execute(stock_levels.update().where(stock_levels.c.tenant_id == tenant).values(values))


def test_held_forecast_quantities_become_their_stored_bytes_and_back(tmp_path, backend, postgres_url) -> None:
    """0017 turns each held forecast's JSON text into the bytes the pipeline writes (db.held_quantities), read back
    as the same decimals; undone, it writes the same text again."""
    engine = _engine_at("0016", tmp_path, backend, postgres_url, "quantities_probe")
    horizons = {"100001": ["0.0001", "99999999999999.9999", "0", "12", "1.5", "10.25"], "100002": ["7"]}
    texts = {sku: orjson.dumps(quantities).decode() for sku, quantities in horizons.items()}
    with engine.begin() as conn:
        for sku, text in texts.items():
            conn.execute(sa.text(
                "INSERT INTO sales_forecasts (tenant_id, is_ecom, store_number, sku_number, horizon_start_date, "
                "horizon_end_date, quantities, generated_at, modified_time, batch_id) VALUES ('t', FALSE, '1001', "
                ":sku, '2026-11-01', '2026-11-06', :text, :now, :now, 'b')"),
                {"sku": sku, "text": text, "now": datetime(2026, 11, 1, tzinfo=UTC)})
    upgrade(engine)

    def held(column: str) -> dict[str, Any]:
        with engine.connect() as conn:
            return dict(conn.execute(sa.text(f"SELECT sku_number, {column} FROM sales_forecasts")).all())

    stored = held("quantities")
    assert stored == {sku: stored_value(quantities) for sku, quantities in horizons.items()}
    decimals = as_decimals(pa.array(list(stored.values()), pa.binary())).to_pylist()
    assert dict(zip(stored, decimals, strict=True)) == {
        sku: [Decimal(quantity) for quantity in quantities] for sku, quantities in horizons.items()}

    with engine.begin() as conn:
        command.downgrade(_config(conn), "0016")
    assert held("quantities") == texts
    upgrade(engine)
    assert held("quantities") == stored
    engine.dispose()
