"""Tenants: the customer organisations; test tenants are separate tenants with their own data."""

import sqlalchemy as sa

from db.ids import new_id, utc_now
from db.schema import tenants


def create_tenant(engine: sa.Engine, name: str, is_test: bool) -> str:
    tenant_id = new_id()
    with engine.begin() as conn:
        conn.execute(tenants.insert().values(id=tenant_id, name=name, is_test=is_test,
                                             created_time=utc_now()))
    return tenant_id


def get_tenant(engine: sa.Engine, tenant_id: str) -> sa.Row | None:
    with engine.connect() as conn:
        return conn.execute(sa.select(tenants).where(tenants.c.id == tenant_id)).first()


def list_tenants(engine: sa.Engine) -> list[sa.Row]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(tenants).order_by(tenants.c.created_time)))
