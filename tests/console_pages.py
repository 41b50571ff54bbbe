"""Driving the operator console over HTTP in tests: signing in as a person's browser would, reading the forms'
CSRF tokens, dead letters to show and replay, and click-and-collect carts to hold."""

import re
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import httpx
import sqlalchemy as sa

from contracts import events
from db import click_and_collect
from db.ids import new_id, utc_now
from db.outbox import order_event
from db.schema import event_outbox, retail_stores
from db.stock import adjust_stock
from tests.conftest import TLS

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_in(html: str) -> str:
    """The CSRF token the page's forms carry."""
    match = _CSRF.search(html)
    assert match, "the page has no form with a CSRF token"
    return match.group(1)


def browser(base_url: str) -> httpx.Client:
    """A client that keeps cookies and does not follow redirects (the tests look at them)."""
    return httpx.Client(base_url=base_url, timeout=30, follow_redirects=False, verify=TLS)


def sign_in_answer(console: httpx.Client, client: dict[str, Any], secret: str | None = None) -> httpx.Response:
    """Open the sign-in form and send it with the client's id and secret (or `secret`)."""
    form = console.get("/console/sign-in")
    assert form.status_code == 200, form.text
    return console.post("/console/sign-in", data={
        "csrf_token": csrf_in(form.text), "client_id": client["clientId"],
        "client_secret": client["clientSecret"] if secret is None else secret, "next": "/console/"})


@contextmanager
def signed_in(base_url: str, client: dict[str, Any]) -> Iterator[httpx.Client]:
    """A browser with a session of the client."""
    with browser(base_url) as console:
        answer = sign_in_answer(console, client)
        assert answer.status_code == 303 and answer.headers["Location"] == "/console/", answer.text
        yield console


def dead_letters(engine: sa.Engine, tenant_id: str, ecom_store_id: str, count: int,
                 answer: str = "webhook at shop.example answered 503 Service Unavailable",
                 short_answer: str | None = None) -> list[str]:
    """`count` events of the store that the bridge gave up on, oldest first."""
    order_ids = [new_id() for _ in range(count)]
    with engine.begin() as conn:
        for order_id in order_ids:
            order_event(conn, tenant_id, ecom_store_id, events.ORDER_CREATED, order_id)
        event_ids = list(conn.scalars(sa.select(event_outbox.c.event_id).where(
            event_outbox.c.tenant_id == tenant_id, event_outbox.c.entity_id.in_(order_ids))
            .order_by(event_outbox.c.event_id)))
        conn.execute(event_outbox.update().where(event_outbox.c.event_id.in_(event_ids)).values(
            dead_letter_time=utc_now(), attempts=8, last_error=answer, last_answer=short_answer))
    return event_ids


def dead_letter_ids(engine: sa.Engine, tenant_id: str, ecom_store_id: str) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(sa.select(event_outbox.c.event_id).where(
            event_outbox.c.tenant_id == tenant_id, event_outbox.c.ecom_store_id == ecom_store_id,
            event_outbox.c.dead_letter_time.is_not(None))))


def held_cart(engine: sa.Engine, tenant_id: str, ecom_store_id: str, sku: sa.Row, name: str) -> str:
    """A click-and-collect cart of one unit of the SKU at the demo's retail store 1001 (given the unit first)."""
    with engine.connect() as conn:
        store = conn.scalar(sa.select(retail_stores.c.id).where(retail_stores.c.tenant_id == tenant_id,
                                                               retail_stores.c.number == "1001"))
    adjust_stock(engine, tenant_id, "1001", sku.number, delta=Decimal(1))
    return click_and_collect.reserve(engine, tenant_id, ecom_store_id, store, name, None,
                                     [click_and_collect.WantedLine(sku.id, Decimal(1))]).parked_cart_id
