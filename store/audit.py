"""The audit trail: one row per authenticated request."""

from datetime import datetime

import sqlalchemy as sa

from store.ids import new_id
from store.schema import audit_events


def record_request(engine: sa.Engine, tenant_id: str, *, client_id: str, token_id: str, request_id: str,
                   method: str, path: str, status: int, duration_ms: float, time: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(audit_events.insert().values(
            id=new_id(), tenant_id=tenant_id, client_id=client_id, token_id=token_id,
            request_id=request_id, method=method, path=path, status=status,
            duration_ms=duration_ms, time=time))


def client_events(engine: sa.Engine, tenant_id: str, client_id: str, limit: int) -> list[sa.Row]:
    """The newest events of one client, newest first."""
    with engine.connect() as conn:
        return list(conn.execute(
            sa.select(audit_events)
            .where(audit_events.c.tenant_id == tenant_id, audit_events.c.client_id == client_id)
            .order_by(audit_events.c.time.desc(), audit_events.c.id.desc()).limit(limit)))
