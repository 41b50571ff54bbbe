"""Click and collect carts not collected within the hold time are released by the workers, on both backends: the
expiry itself (which carts, its events, what a second run does), the pipeline worker that runs it, and the real
processes: `pia serve` on the embedded DuckDB file and `pia worker` on PostgreSQL, with `pia admin cnc` reading,
collecting and cancelling carts through the server or on the database."""

import json
import os
import signal
import subprocess
import threading
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.events import INVENTORY_UPDATED
from db import click_and_collect
from db.ids import utc_now
from db.schema import click_and_collect_reservations, event_outbox, retail_stores, stock_levels
from db.stock import adjust_stock
from pipeline.worker import InProcessTenantLocks, Pipeline
from serving.demo import seed_demo_tenant
from tests.conftest import client_of, wait_for
from tests.stock_checks import assert_stock_is_true
from tests.test_admin import PIA, Served
from tests.web_shop import Shop

HOLD = timedelta(hours=72)


class Carts:
    """A tenant of a test's own store (the demo's test catalogue) and carts of one unit of a SKU at store 1001."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.world = seed_demo_tenant(engine, "expiry", is_test=True)
        self.tenant = self.world["id"]
        self.ecom_store = client_of(self.world, "ecom")["resource"]
        self.sku = Shop(None, engine, self.world, "", 0).regular_sku()  # type: ignore[arg-type]
        adjust_stock(engine, self.tenant, "1001", self.sku.number, on_hand=Decimal(5))
        with engine.connect() as conn:
            self.store = conn.scalar(sa.select(retail_stores.c.id).where(retail_stores.c.tenant_id == self.tenant,
                                                                         retail_stores.c.number == "1001"))

    def reserve(self) -> click_and_collect.Reservation:
        return click_and_collect.reserve(self.engine, self.tenant, self.ecom_store, self.store, "Kari", None,
                                         [click_and_collect.WantedLine(self.sku.id, Decimal(1))])

    def state(self, cart: click_and_collect.Reservation) -> str:
        found = click_and_collect.read_cart(self.engine, self.tenant, cart.parked_cart_id)
        assert found is not None
        return found.state

    def reserved(self) -> tuple[Decimal, Decimal]:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(stock_levels.c.on_hand, stock_levels.c.reserved).where(
                stock_levels.c.tenant_id == self.tenant, stock_levels.c.location_id == self.store,
                stock_levels.c.sku_id == self.sku.id)).one()
        return row.on_hand, row.reserved

    def events(self) -> int:
        with self.engine.connect() as conn:
            return conn.scalar(sa.select(sa.func.count()).select_from(event_outbox).where(
                event_outbox.c.tenant_id == self.tenant, event_outbox.c.ecom_store_id == self.ecom_store,
                event_outbox.c.subject == INVENTORY_UPDATED, event_outbox.c.entity_id == self.sku.id))


def test_expiry_releases_the_carts_past_their_hold_and_says_when_the_next_falls_due(own_store) -> None:
    _, engine = own_store
    carts = Carts(engine)
    first, collected, last = carts.reserve(), carts.reserve(), carts.reserve()
    click_and_collect.collect(engine, carts.tenant, collected.parked_cart_id)
    assert carts.reserved() == (4, 2)

    # Before the first cart's hold has passed: nothing, and it is the next due.
    assert click_and_collect.expire_carts(engine, first.created_time + HOLD - timedelta(seconds=1), HOLD) == \
        first.created_time + HOLD
    assert carts.reserved() == (4, 2)

    events = carts.events()
    due = click_and_collect.expire_carts(engine, first.created_time + HOLD, HOLD)
    assert due == last.created_time + HOLD  # the first expired; the last falls due next
    assert [carts.state(cart) for cart in (first, collected, last)] == ["EXPIRED", "COLLECTED", "ACTIVE"]
    assert carts.reserved() == (4, 1)  # released, not taken: on hand stays
    assert carts.events() == events + 1
    assert_stock_is_true(engine, carts.tenant)
    for end in (click_and_collect.collect, click_and_collect.cancel):
        with pytest.raises(click_and_collect.CartNotActive) as refused:
            end(engine, carts.tenant, first.parked_cart_id)
        assert refused.value.cart.state == "EXPIRED"

    assert click_and_collect.expire_carts(engine, first.created_time + HOLD, HOLD) == last.created_time + HOLD
    assert carts.events() == events + 1  # a second run changes nothing
    assert click_and_collect.expire_carts(engine, last.created_time + HOLD, HOLD) is None  # no ACTIVE cart left
    assert carts.reserved() == (4, 0)
    assert_stock_is_true(engine, carts.tenant)


def test_the_pipeline_worker_expires_carts_once_their_hold_has_passed(own_store) -> None:
    settings, engine = own_store
    carts = Carts(engine)
    cart = carts.reserve()
    clock = [utc_now()]
    pipeline = Pipeline(engine, settings.resolved_staging_dir, InProcessTenantLocks(), cart_hold=HOLD,
                        clock=lambda: clock[0])
    stop = threading.Event()
    worker = threading.Thread(target=pipeline.run, args=(stop, None, 0.05))
    worker.start()
    try:
        wait_for(lambda: pipeline._carts_due is not None, 30, "the worker's first look at the carts")
        assert carts.state(cart) == "ACTIVE"
        assert pipeline._carts_due == cart.created_time + HOLD  # it sleeps until the cart falls due
        clock[0] = cart.created_time + HOLD
        wait_for(lambda: carts.state(cart) == "EXPIRED", 30, "the worker to expire the cart")
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not worker.is_alive()
    assert carts.reserved() == (5, 0)


def _admin_env(settings: Any, world: dict[str, Any], hold_hours: str) -> dict[str, str]:
    admin = client_of(world, "admin")
    return {**os.environ, "PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url,
            "PIA_SECRET_KEY": settings.secret_key.get_secret_value(), "PIA_ADMIN_URL": "",
            "PIA_ADMIN_CLIENT_ID": admin["clientId"], "PIA_ADMIN_CLIENT_SECRET": admin["clientSecret"],
            "PIA_WORKER_POLL_SECONDS": "0.1", "PIA_CLICK_AND_COLLECT_HOLD_HOURS": hold_hours}


def test_the_processes_expire_carts_and_pia_admin_cnc_ends_them(backend, own_store) -> None:
    """DuckDB: `pia serve` holds the file and expires carts; `pia admin cnc` goes through its API (--url), and works
    on the file directly once it stopped. PostgreSQL: `pia worker` expires them while `pia admin cnc` works on the
    database directly."""
    settings, engine = own_store
    carts = Carts(engine)
    kept, lapsing, cancelled = carts.reserve(), carts.reserve(), carts.reserve()
    tenant = carts.tenant
    env = _admin_env(settings, carts.world, hold_hours="0.0002")  # 0.72 s: every cart here falls due at once

    def cnc(action: str, cart: click_and_collect.Reservation, url: str | None = None,
            expect: int = 0) -> dict[str, Any]:
        done = subprocess.run([PIA, "admin", "cnc", action, cart.parked_cart_id, "--tenant", tenant,
                               *(("--url", url) if url else ())],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == expect, done.stdout + done.stderr
        if expect == 0:
            return json.loads(done.stdout)
        # The error body (indented JSON, its first line a lone "{") ends stderr; on the database directly, the
        # migration's log lines (JSON, one a line) come before it.
        lines = done.stderr.splitlines()
        return json.loads("\n".join(lines[len(lines) - 1 - lines[::-1].index("{"):]))

    # No process expires anything yet: on the database, one cart is collected and one cancelled.
    if backend == "duckdb":
        engine.dispose()  # the file is the command's, then the server's
    assert cnc("collect", kept)["lineItems"][0]["collectedQuantity"] == "1"
    assert cnc("cancel", cancelled)["state"] == "CANCELLED"
    assert cnc("show", lapsing)["state"] == "ACTIVE"

    if backend == "duckdb":
        server = Served(env)
        try:
            wait_for(lambda: cnc("show", lapsing, server.url)["state"] == "EXPIRED", 60, "pia serve to expire it")
            refused = cnc("collect", lapsing, server.url, expect=1)
            assert (refused["error"], refused["details"]) == ("CART_NOT_ACTIVE", {"state": "EXPIRED"})
        finally:
            server.stop()
        assert ("GET", "/admin/v1/tenants/<tenantId>/click_and_collect/<parkedCartId>") in server.requests()
    else:
        worker = subprocess.Popen([PIA, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: cnc("show", lapsing)["state"] == "EXPIRED", 60, "pia worker to expire it")
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
    shown = cnc("show", lapsing)
    assert (shown["state"], shown["expiresAt"], shown["lineItems"][0]["reservedQuantity"]) == ("EXPIRED", None, "0")
    assert cnc("cancel", lapsing, expect=1)["details"] == {"state": "EXPIRED"}
    with engine.connect() as conn:
        states = dict(conn.execute(sa.select(click_and_collect_reservations.c.id,
                                             click_and_collect_reservations.c.state)
                                   .where(click_and_collect_reservations.c.tenant_id == tenant)).all())
    assert states == {kept.parked_cart_id: "COLLECTED", lapsing.parked_cart_id: "EXPIRED",
                      cancelled.parked_cart_id: "CANCELLED"}
    assert carts.reserved() == (4, 0)
    assert_stock_is_true(engine, tenant)
    engine.dispose()


def test_cnc_commands_name_what_is_wrong(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from serving.cli import main

    result = CliRunner().invoke(main, ["admin", "cnc", "collect", "--tenant", "t"],
                                env={"PIA_DATA_DIR": str(tmp_path), "PIA_ADMIN_URL": ""})
    assert result.exit_code == 2 and "PARKED_CART_ID" in result.output, result.output
