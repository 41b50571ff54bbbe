"""The console's session store on both backends, as a Hypothesis state machine: sessions started, ended and
expiring as a clock moves; a session is live exactly while it was started, not ended and not expired, and the
table never holds a session id."""

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from db.console_sessions import end_session, live_session, start_session
from db.ids import new_id
from db.schema import console_sessions

START = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def _machine(engine: sa.Engine, tenant_id: str) -> type[RuleBasedStateMachine]:
    class Sessions(RuleBasedStateMachine):
        ids = Bundle("ids")

        def __init__(self) -> None:
            super().__init__()
            self.now = START
            self.stored: dict[str, datetime] = {}  # session id → expiry, of the sessions not ended
            self.started: list[str] = []

        @rule(target=ids, lifetime=st.integers(min_value=1, max_value=7200))
        def start(self, lifetime: int) -> str:
            session_id, session = start_session(engine, tenant_id, new_id(), timedelta(seconds=lifetime), self.now)
            assert session.expires_time == self.now + timedelta(seconds=lifetime)
            self.stored[session_id] = session.expires_time
            self.started.append(session_id)
            return session_id

        @rule(session_id=ids)
        def end(self, session_id: str) -> None:
            assert end_session(engine, session_id) == (session_id in self.stored)
            self.stored.pop(session_id, None)

        @rule(seconds=st.integers(min_value=0, max_value=3600))
        def wait(self, seconds: int) -> None:
            self.now += timedelta(seconds=seconds)

        @invariant()
        def live_exactly_while_started_not_ended_not_expired(self) -> None:
            for session_id in self.started:
                live = live_session(engine, session_id, self.now)
                expires = self.stored.get(session_id)
                assert (live is not None) == (expires is not None and expires > self.now), session_id
                assert live is None or (live.tenant_id, live.expires_time) == (tenant_id, expires)

        @invariant()
        def no_session_id_is_stored(self) -> None:
            with engine.connect() as conn:
                stored = {str(value) for row in conn.execute(
                    sa.select(console_sessions).where(console_sessions.c.tenant_id == tenant_id)) for value in row}
            assert not stored & set(self.started)

    return Sessions


def test_sessions_live_exactly_until_ended_or_expired(engine) -> None:
    machine = _machine(engine, new_id())
    machine.TestCase.settings = hypothesis_settings(max_examples=15, stateful_step_count=20, deadline=None)
    machine.TestCase().runTest()


@pytest.mark.parametrize("session_id", ["", "x", "not-a-session"])
def test_unknown_ids_are_no_session(engine, session_id) -> None:
    assert live_session(engine, session_id, START) is None
    assert end_session(engine, session_id) is False
