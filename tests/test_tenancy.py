"""The guard of "every statement on a tenant's table names the tenant" (db/tenancy.py), which tests/conftest.py
installs for the whole suite: it catches a statement without the predicate, lets the declared exceptions, DDL and
migrations through, and its verdict on generated statements is the rule's."""

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from db import event_delivery
from db.engine import create_engine, is_duckdb
from db.event_delivery import StoreKey
from db.ids import new_id, utc_now
from db.migrate import upgrade
from db.schema import event_outbox, metadata, order_lines, orders, signing_keys, stock_levels
from db.tenancy import (
    SERVICE_WIDE_TABLES,
    TENANT_TABLES,
    TenantNotNamed,
    across_tenants,
    install_tenant_guard,
    unnamed_tenant_tables,
)
from settings import Settings
from tests.conftest import TESTS

TENANT = "t-1"


@pytest.fixture
def unexempt() -> Iterator[None]:
    """The guard as the service meets it: statements made from this file are checked too."""
    install_tenant_guard()
    yield
    install_tenant_guard(exempt_code=TESTS)


def test_every_table_is_tenant_owned_or_named_service_wide_with_a_reason() -> None:
    assert set(metadata.tables) == TENANT_TABLES | set(SERVICE_WIDE_TABLES)
    assert not TENANT_TABLES & set(SERVICE_WIDE_TABLES)
    assert all(reason.strip() for reason in SERVICE_WIDE_TABLES.values())


def test_a_statement_without_the_tenant_fails_where_it_runs_and_a_marked_one_passes(unexempt, engine) -> None:
    missing = sa.select(orders.c.id).where(orders.c.id == new_id())
    with engine.connect() as conn:
        with pytest.raises(TenantNotNamed, match="orders names no tenant"):
            conn.execute(missing)
        with pytest.raises(TenantNotNamed, match="event_outbox"):
            conn.execute(event_outbox.update().where(event_outbox.c.event_id == new_id()).values(attempts=0))
        with pytest.raises(TenantNotNamed, match="stock_levels"):
            conn.exec_driver_sql("SELECT on_hand FROM stock_levels WHERE sku_id = 'x'")
        assert conn.execute(across_tenants(missing, "a test's reason")).all() == []
        assert conn.execute(missing.where(orders.c.tenant_id == TENANT)).all() == []
        assert conn.execute(sa.select(signing_keys.c.kid).where(signing_keys.c.kid == "x")).all() == []
        conn.exec_driver_sql("SELECT on_hand FROM stock_levels WHERE tenant_id = 'x'")
        conn.rollback()


def test_ddl_and_migrations_pass(unexempt, tmp_path, backend, postgres_url) -> None:
    if backend == "postgresql":
        engine = sa.create_engine(postgres_url)
        schema = f"guard_{new_id().replace('-', '')[-8:]}"
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
        engine = sa.create_engine(postgres_url, connect_args={"options": f"-c search_path={schema}"})
    else:
        engine = create_engine(Settings(data_dir=tmp_path))
    upgrade(engine)  # every migration from an empty database, under the guard
    probe = sa.Table("probe", sa.MetaData(), sa.Column("tenant_id", sa.String(36)))
    with engine.begin() as conn:
        conn.execute(sa.schema.CreateTable(probe))
        conn.execute(sa.schema.DropTable(probe))
    if not is_duckdb(engine):
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    engine.dispose()


def test_the_checks_statements_are_made_of() -> None:
    other = stock_levels.alias("other")
    assert unnamed_tenant_tables(orders.insert().values(id="x", tenant_id=TENANT).returning(orders.c.id)) == set()
    assert unnamed_tenant_tables(orders.insert().from_select(
        ["id"], sa.select(order_lines.c.order_id).where(order_lines.c.id == "x"))) == {"order_lines"}
    assert unnamed_tenant_tables(sa.select(other.c.on_hand).where(other.c.tenant_id == TENANT)) == set()
    assert unnamed_tenant_tables(sa.select(other.c.on_hand, stock_levels.c.on_hand)
                                 .where(other.c.tenant_id == TENANT)) == {"stock_levels"}
    correlated = sa.select(sa.func.count()).where(order_lines.c.tenant_id == orders.c.tenant_id,
                                                  order_lines.c.order_id == orders.c.id).scalar_subquery()
    assert unnamed_tenant_tables(sa.select(orders.c.id, correlated).where(orders.c.tenant_id == TENANT)) == set()
    assert unnamed_tenant_tables(sa.select(orders.c.id, correlated)) == {"orders", "order_lines"}
    keyed = sa.select(orders.c.id).where(sa.tuple_(orders.c.tenant_id, orders.c.id).in_([(TENANT, "x")]))
    assert unnamed_tenant_tables(keyed) == set()
    assert unnamed_tenant_tables(sa.select(orders.c.id).where(orders.c.tenant_id != TENANT)) == {"orders"}
    assert unnamed_tenant_tables(sa.text("DELETE FROM orders WHERE id = :id")) == {"orders"}
    assert unnamed_tenant_tables("UPDATE orders SET status = 'OPEN' WHERE tenant_id = :t") == set()
    assert unnamed_tenant_tables("INSERT INTO orders (id) VALUES ('x')") == set()


TABLES = sorted(TENANT_TABLES)
PREDICATES = st.sampled_from(["none", "equals", "in", "other column"])


def _predicate(table: sa.FromClause, kind: str) -> sa.ColumnElement[bool] | None:
    first = next(column for column in table.c if column.name != "tenant_id")
    return {"none": None, "equals": table.c.tenant_id == TENANT, "in": table.c.tenant_id.in_([TENANT, "t-2"]),
            "other column": first == "x"}[kind]


@settings(max_examples=300, deadline=None)
@given(names=st.lists(st.sampled_from(TABLES), min_size=1, max_size=3), predicates=st.lists(PREDICATES, min_size=3,
       max_size=3), links=st.lists(st.booleans(), min_size=2, max_size=2), kind=st.sampled_from(["select", "update",
                                                                                                "delete"]))
def test_the_guard_flags_exactly_the_tables_no_tenant_reaches(names, predicates, links, kind) -> None:
    """Up to three tenant tables (aliases, so a table may come twice), each with a predicate on its tenant_id or
    not, joined to the one before on tenant_id or not: a table is named when its own predicate names the tenant or
    a chain of tenant_id joins leads to one that does."""
    tables = [metadata.tables[name].alias(f"t{index}") for index, name in enumerate(names)]
    conditions = [condition for table, kind_ in zip(tables, predicates, strict=False)
                  if (condition := _predicate(table, kind_)) is not None]
    conditions += [later.c.tenant_id == earlier.c.tenant_id
                   for earlier, later, linked in zip(tables, tables[1:], links, strict=False) if linked]
    bound = [kind_ in ("equals", "in") for kind_ in predicates[:len(tables)]]
    for _ in tables:  # along the joins, both ways, until nothing changes
        for index, linked in enumerate(links[:len(tables) - 1]):
            if linked and (bound[index] or bound[index + 1]):
                bound[index] = bound[index + 1] = True
    expected = {name for name, is_bound in zip(names, bound, strict=True) if not is_bound}
    if kind == "select":
        statement = sa.select(*(table.c.tenant_id for table in tables)).where(sa.true(), *conditions)
    else:
        # The target is the first table itself; the others are read by the statement (UPDATE … FROM … RETURNING).
        # Setting tenant_id is no predicate: the SET clause names no rows.
        target = metadata.tables[names[0]]
        tables[0] = target
        conditions = [_retarget(condition, target) for condition in conditions]
        statement = (target.update().values(tenant_id=TENANT) if kind == "update" else target.delete()).where(
            sa.true(), *conditions).returning(*(table.c.tenant_id for table in tables))
    assert unnamed_tenant_tables(statement) == expected


def _retarget(condition: sa.ColumnElement[bool], target: sa.Table) -> sa.ColumnElement[bool]:
    """The condition with the first alias (t0) replaced by the table itself."""
    return sa.sql.visitors.replacement_traverse(
        condition, {}, lambda element: target.c[element.name]
        if isinstance(element, sa.Column) and getattr(element.table, "name", None) == "t0" else None)


def test_the_bridge_settles_only_its_own_stores_events(engine) -> None:
    """The bridge's writes find an event by its id and its store: a write on behalf of one store leaves another
    tenant's event of that id alone (they found rows by event id alone, and the guard refused them)."""
    ours, theirs = StoreKey(new_id(), new_id()), StoreKey(new_id(), new_id())
    event_id = new_id()
    with engine.begin() as conn:
        conn.execute(event_outbox.insert().values(event_id=event_id, tenant_id=theirs.tenant_id,
                                                  ecom_store_id=theirs.ecom_store_id, subject="ProductUpdated",
                                                  entity_id=new_id(), datetime=utc_now()))

    def row() -> tuple:
        with engine.connect() as conn:
            return tuple(conn.execute(sa.select(event_outbox.c.delivered_time, event_outbox.c.attempts,
                                                event_outbox.c.last_error, event_outbox.c.dead_letter_time)
                                      .where(event_outbox.c.event_id == event_id)).one())

    untouched = row()
    event_delivery.mark_delivered(engine, ours, [event_id])
    event_delivery.discard(engine, ours, [event_id])
    assert event_delivery.record_failure(engine, ours, event_id, "500", answer="500", counted=True,
                                         credentials_refused=False) == 0
    event_delivery.dead_letter(engine, ours, event_id)
    assert row() == untouched
    assert event_delivery.record_failure(engine, theirs, event_id, "500", answer="500", counted=True,
                                         credentials_refused=False) == 1
    event_delivery.dead_letter(engine, theirs, event_id)
    assert row()[1:] == (1, "500", row()[3]) and row()[3] is not None
