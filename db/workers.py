"""Pipeline worker heartbeats: each worker's row says it is alive; /healthcheck reads the freshest."""

import os
import socket
from datetime import datetime

import sqlalchemy as sa

from db.engine import quiet_commit
from db.schema import pipeline_workers


def beat(engine: sa.Engine, worker_id: str, now: datetime) -> None:
    """Record that the worker is alive; its first beat adds its row (only the worker itself writes it). A beat is
    no work for the in-process roles' polls (db.polls): its commit leaves them idle."""
    with engine.begin() as conn:
        quiet_commit(conn)
        updated = conn.execute(pipeline_workers.update().where(pipeline_workers.c.worker_id == worker_id)
                               .values(heartbeat_time=now))
        if updated.rowcount == 0:
            conn.execute(pipeline_workers.insert().values(
                worker_id=worker_id, host=socket.gethostname()[:255], pid=os.getpid(), started_time=now,
                heartbeat_time=now))


def retire(engine: sa.Engine, worker_id: str) -> None:
    """A worker that stops cleanly takes its row away; a killed one's row ages out (see db.retention)."""
    with engine.begin() as conn:
        conn.execute(pipeline_workers.delete().where(pipeline_workers.c.worker_id == worker_id))


def latest_heartbeat(engine: sa.Engine) -> datetime | None:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.max(pipeline_workers.c.heartbeat_time))).scalar_one()
