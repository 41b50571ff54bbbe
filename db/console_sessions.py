"""The operator console's sessions: started at sign-in, ended at sign-out or when they expire.

The session id (256 random bits) lives only in the browser's cookie; rows are keyed by its SHA-256, so reading the
table gives nothing to sign in with. Expired rows are refused at once and removed by retention.
"""

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from db.schema import console_sessions as sessions
from db.tenancy import across_tenants

# A session id names its tenant: the cookie is all a request brings before its session is found.
_BY_SESSION_ID = "a console session is found by its id, which names the tenant"


@dataclass(frozen=True)
class ConsoleSession:
    session_hash: str
    tenant_id: str
    client_id: str
    expires_time: datetime


def session_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def start_session(engine: sa.Engine, tenant_id: str, client_id: str, lifetime: timedelta,
                  now: datetime) -> tuple[str, ConsoleSession]:
    """A new session of the client: its id (for the cookie, never stored) and what is stored of it."""
    session_id = secrets.token_urlsafe(32)
    session = ConsoleSession(session_hash(session_id), tenant_id, client_id, now + lifetime)
    with engine.begin() as conn:
        conn.execute(sessions.insert().values(session_hash=session.session_hash, tenant_id=tenant_id,
                                              client_id=client_id, created_time=now,
                                              expires_time=session.expires_time))
    return session_id, session


def live_session(engine: sa.Engine, session_id: str, now: datetime) -> ConsoleSession | None:
    """The session of this id unless it ended or expired."""
    with engine.connect() as conn:
        row = conn.execute(across_tenants(
            sa.select(sessions.c.session_hash, sessions.c.tenant_id, sessions.c.client_id, sessions.c.expires_time)
            .where(sessions.c.session_hash == session_hash(session_id), sessions.c.expires_time > now),
            _BY_SESSION_ID)).first()
    return ConsoleSession(*row) if row else None


def end_session(engine: sa.Engine, session_id: str) -> bool:
    """Sign-out: the session is gone for every replica; False when there was none."""
    with engine.begin() as conn:
        return conn.execute(across_tenants(
            sessions.delete().where(sessions.c.session_hash == session_hash(session_id)), _BY_SESSION_ID)).rowcount == 1
