"""API clients: one scope each, bound to an eCom store, a loyalty program or (demand_planning, admin) the tenant.

The admin scope is the back office's own: it reaches the /admin/v1/tenants/{tenantId}/… routes, nothing else.
"""

from dataclasses import dataclass

import sqlalchemy as sa

from db.ids import new_id, utc_now
from db.schema import api_clients, ecom_stores, loyalty_programs
from db.tenancy import across_tenants

SCOPES = ("ecom", "loyalty_programs", "demand_planning", "admin")
# Scopes that cover the whole tenant and take no resource.
TENANT_WIDE_SCOPES = ("demand_planning", "admin")
DEMAND_PLANNING_PERMISSION = "demand_planning"


class ClientRejected(ValueError):
    """The client cannot be created as asked (unknown resource, wrong scope)."""


@dataclass(frozen=True)
class Client:
    id: str
    tenant_id: str
    name: str
    scope: str
    resource_id: str | None
    permissions: tuple[str, ...]
    secret_hash: str
    enabled: bool
    rate_limit_per_minute: int | None

    @classmethod
    def from_row(cls, row: sa.Row) -> "Client":
        return cls(id=row.id, tenant_id=row.tenant_id, name=row.name, scope=row.scope,
                   resource_id=row.resource_id, permissions=tuple(row.permissions.split()),
                   secret_hash=row.secret_hash, enabled=row.enabled,
                   rate_limit_per_minute=row.rate_limit_per_minute)


def _resource_exists(conn: sa.Connection, tenant_id: str, scope: str, resource_id: str) -> bool:
    table = ecom_stores if scope == "ecom" else loyalty_programs
    query = sa.select(table.c.id).where(table.c.tenant_id == tenant_id, table.c.id == resource_id)
    return conn.execute(query).first() is not None


def create_client(engine: sa.Engine, tenant_id: str, *, name: str, scope: str, resource_id: str | None,
                  permissions: tuple[str, ...], secret_hash: str) -> str:
    if scope not in SCOPES:
        raise ClientRejected(f"scope must be one of {', '.join(SCOPES)}")
    if scope in TENANT_WIDE_SCOPES:
        if resource_id:
            raise ClientRejected(f"a {scope} client covers the whole tenant and takes no resource")
    elif not resource_id:
        raise ClientRejected(f"a {scope} client needs the id of its "
                             f"{'eCom store' if scope == 'ecom' else 'loyalty program'}")
    client_id = new_id()
    with engine.begin() as conn:
        if resource_id and not _resource_exists(conn, tenant_id, scope, resource_id):
            raise ClientRejected(f"{resource_id} is not a {scope} resource of tenant {tenant_id}")
        conn.execute(api_clients.insert().values(
            id=client_id, tenant_id=tenant_id, name=name, scope=scope, resource_id=resource_id,
            permissions=" ".join(sorted(set(permissions))), secret_hash=secret_hash, enabled=True,
            rate_limit_per_minute=None, created_time=utc_now()))
    return client_id


def get_client(engine: sa.Engine, tenant_id: str, client_id: str) -> Client | None:
    with engine.connect() as conn:
        row = conn.execute(sa.select(api_clients).where(
            api_clients.c.tenant_id == tenant_id, api_clients.c.id == client_id)).first()
    return Client.from_row(row) if row else None


def find_client(engine: sa.Engine, client_id: str) -> Client | None:
    """Operators name a client by id alone; the id is globally unique, so this finds its tenant."""
    with engine.connect() as conn:
        row = conn.execute(across_tenants(sa.select(api_clients).where(api_clients.c.id == client_id),
                                          "an operator names a client by id alone")).first()
    return Client.from_row(row) if row else None


def list_clients(engine: sa.Engine, tenant_id: str) -> list[Client]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(api_clients).where(api_clients.c.tenant_id == tenant_id)
                            .order_by(api_clients.c.created_time, api_clients.c.id))
        return [Client.from_row(row) for row in rows]


def update_client(engine: sa.Engine, tenant_id: str, client_id: str, **values: object) -> bool:
    """Set enabled or rate_limit_per_minute; False when the client does not exist."""
    with engine.begin() as conn:
        result = conn.execute(api_clients.update().where(
            api_clients.c.tenant_id == tenant_id, api_clients.c.id == client_id).values(**values))
    return result.rowcount == 1
