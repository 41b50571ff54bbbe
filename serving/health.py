"""Probes of the service's health, read by /healthcheck and the console's overview."""

import time
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from contracts.rendering import instant
from db.batches import oldest_unfinished
from db.ids import utc_now
from db.workers import latest_heartbeat


def probe_database(engine: sa.Engine) -> float:
    """Milliseconds one trivial query takes; raises when the database cannot be reached."""
    started = time.perf_counter()
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
    return round((time.perf_counter() - started) * 1000, 2)


def age_seconds(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else round((now - then).total_seconds(), 1)


def probe_pipeline(engine: sa.Engine, stale_seconds: float, tenant_id: str | None = None) -> dict[str, Any]:
    """The workers' freshest heartbeat (they serve every tenant) and the oldest PENDING batch, of every tenant or of
    one. Stalled: work waits, no worker beats."""
    now = utc_now()
    heartbeat, waiting = latest_heartbeat(engine), oldest_unfinished(engine, tenant_id)
    heartbeat_age = age_seconds(now, heartbeat)
    alive = heartbeat_age is not None and heartbeat_age <= stale_seconds
    return {"status": "ok" if alive or not waiting.any_unfinished else "stalled",
            "lastHeartbeat": instant(heartbeat), "heartbeatAgeSeconds": heartbeat_age,
            "oldestPendingAgeSeconds": age_seconds(now, waiting.oldest_pending)}
