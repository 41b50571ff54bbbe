"""`pia admin`: tenants, clients, secrets, keys, back-office load and the audit trail, from the command line."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from argon2 import PasswordHasher
from click.testing import CliRunner

from contracts import events
from db.engine import create_engine
from db.migrate import upgrade
from db.schema import api_clients, event_outbox, skus
from serving.admin import issue_client
from serving.cli import main
from serving.demo import seed_demo_tenant
from settings import Settings
from tests.conftest import bearer, client_of, free_port, get_token, wait_for

PIA = str(Path(sys.executable).parent / "pia")


@pytest.fixture
def pia(settings):
    env = {"PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url,
           "PIA_SECRET_KEY": settings.secret_key.get_secret_value()}

    def run(*args: str, expect: int = 0):
        result = CliRunner().invoke(main, list(args), env=env)
        assert result.exit_code == expect, result.output
        return result

    return run


def _json(result) -> object:
    return json.loads(result.stdout)


def test_tenant_and_client_lifecycle(pia, engine, http, world, settings) -> None:
    tenant = _json(pia("admin", "create-tenant", "Acme", "--test"))
    assert tenant["test"] is True
    assert tenant["tenantId"] in {t["tenantId"] for t in _json(pia("admin", "list-tenants"))}

    program = world["loyaltyPrograms"][0]["id"]
    created = _json(pia("admin", "create-client", "--tenant", world["id"], "--scope", "loyalty_programs",
                        "--resource", program))
    secret = created["clientSecret"]
    assert len(secret) >= 43  # 32 random bytes, URL-safe base64
    with engine.connect() as conn:
        stored = conn.execute(sa.select(api_clients.c.secret_hash)
                              .where(api_clients.c.id == created["clientId"])).scalar_one()
    assert stored.startswith("$argon2id$") and secret not in stored
    assert PasswordHasher().verify(stored, secret)

    listed = _json(pia("admin", "list-clients", "--tenant", world["id"]))
    assert created["clientId"] in {c["clientId"] for c in listed}
    assert all("clientSecret" not in c for c in listed)

    world_client = {**created, "resource": program}
    token = bearer(get_token(http, world, world_client))
    stores = f"/v1/tenants/{world['id']}/loyalty_programs/{program}/retail_stores"
    assert http.get(stores, headers=token).status_code == 200  # the server now remembers the client
    assert _json(pia("admin", "disable-client", created["clientId"]))["enabled"] is False
    refused = http.post("/oauth2/token", data={"grant_type": "client_credentials", "tenant_id": world["id"]},
                        auth=(created["clientId"], secret))
    assert refused.status_code == 401
    # Nothing tells the server (in production `pia admin` is another process): its remembered client expires
    # after PIA_CLIENT_CACHE_SECONDS, and from then on the token already issued is refused too.
    cache_seconds = settings.client_cache_seconds
    wait_for(lambda: http.get(stores, headers=token).status_code == 401, 4 * cache_seconds,
             "the disabled client's token to be refused")
    assert _json(pia("admin", "enable-client", created["clientId"]))["enabled"] is True
    get_token(http, world, world_client)
    wait_for(lambda: http.get(stores, headers=token).status_code == 200, 4 * cache_seconds,
             "the enabled client's token to be accepted again")


@pytest.mark.parametrize("args", [
    ["--scope", "ecom"],                                                  # ecom needs its store
    ["--scope", "ecom", "--resource", "00000000-0000-7000-8000-000000000000"],  # not this tenant's
    ["--scope", "demand_planning", "--resource", "x"],                    # demand planning takes none
    ["--scope", "ecom", "--demand-planning-permission"],
])
def test_client_creation_refuses_wrong_bindings(pia, world, args) -> None:
    result = pia("admin", "create-client", "--tenant", world["id"], *args, expect=1)
    assert "Error" in result.output


def test_demand_planning_client_with_and_without_permission(pia, world) -> None:
    with_permission = _json(pia("admin", "create-client", "--tenant", world["id"], "--scope",
                                "demand_planning", "--demand-planning-permission"))
    without = _json(pia("admin", "create-client", "--tenant", world["id"], "--scope", "demand_planning"))
    assert with_permission["permissions"] == ["demand_planning"] and without["permissions"] == []


def test_rotate_key_is_published_at_once_by_a_warm_server(pia, http, monkeypatch) -> None:
    monkeypatch.setattr("serving.tokens.KEY_CACHE_SECONDS", 3600.0)  # the server's copy does not age out here
    before = {key["kid"] for key in http.get("/.well-known/jwks.json").json()["keys"]}
    kid = _json(pia("admin", "rotate-key"))["kid"]
    after = {key["kid"] for key in http.get("/.well-known/jwks.json").json()["keys"]}
    assert kid not in before and after >= before | {kid}


def test_audit_records_every_authenticated_request(pia, http, world) -> None:
    client = client_of(world, "demand_planning")
    token = get_token(http, world, client)
    base = f"/v1/tenants/{world['id']}/demand_planning"
    http.get(f"{base}/limits", headers=bearer(token))
    http.get(f"{base}/retail_stores?x=1", headers=bearer(token))
    http.get(f"/v1/tenants/{world['id']}/ecom_stores/{client_of(world, 'ecom')['resource']}/retail_stores",
             headers=bearer(token))  # 403: still audited
    http.get(f"{base}/limits")  # no token: nobody to attribute it to, not audited

    def three_events() -> list | None:
        events = _json(pia("admin", "audit", "--client", client["clientId"]))
        return events if len(events) >= 3 else None

    # Audit rows are written in batches after the answers go out: wait for the three (and see no more).
    events = wait_for(three_events, 10, "three audit rows")
    assert [(e["method"], e["path"].split("/")[-1], e["status"]) for e in events] == [
        ("GET", "retail_stores", 403), ("GET", "retail_stores?x=1", 200), ("GET", "limits", 200)]
    assert all(e["tokenId"] and e["requestId"] and e["durationMs"] >= 0 and e["time"].endswith("Z")
               for e in events)


def test_load_is_all_or_nothing_and_idempotent(pia, engine, world, tmp_path) -> None:
    document = {"skus": [{"number": "CLI-1", "name": "Cli sku"}]}
    good = tmp_path / "good.json"
    good.write_text(json.dumps(document))
    assert _json(pia("admin", "load", str(good), "--tenant", world["id"]))["changed"] is True
    assert _json(pia("admin", "load", str(good), "--tenant", world["id"]))["changed"] is False
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"skus": [{"number": "CLI-2", "name": "ok"}, {"number": "", "name": 5}]}))
    result = pia("admin", "load", str(bad), "--tenant", world["id"], expect=1)
    assert "skus[1].number" in result.stderr and "skus[1].name" in result.stderr
    with engine.connect() as conn:
        assert conn.execute(sa.select(skus.c.id).where(skus.c.tenant_id == world["id"],
                                                       skus.c.number == "CLI-2")).first() is None


def test_back_office_commands_work_on_the_database_directly(pia, engine, world, tmp_path) -> None:
    """Without --url the commands run the admin API's own operations on the database, with its JSON."""
    tenant = world["id"]
    adjusted = _json(pia("admin", "stock", "adjust", "--tenant", tenant, "--location", "1002", "--sku", "100001",
                         "--delta", "7", "--reason", "delivery"))
    assert (adjusted["locationType"], adjusted["onHand"], adjusted["changed"]) == ("RETAIL_STORE", "7", True)
    counted = _json(pia("admin", "stock", "adjust", "--tenant", tenant, "--location", "1002", "--sku", "100001",
                        "--delta", "-2"))
    assert counted["onHand"] == "5"
    refused = pia("admin", "stock", "adjust", "--tenant", tenant, "--location", "1002", "--sku", "100001",
                  "--on-hand", "-1", expect=1)
    problem = json.loads(refused.stderr)["details"]["errors"][0]
    assert (problem["path"], problem["code"]) == ("onHand", "NEGATIVE_ON_HAND")
    missing = pia("admin", "stock", "adjust", "--tenant", tenant, "--location", "1002", "--sku", "nope",
                  "--delta", "1", expect=1)
    assert json.loads(missing.stderr)["error"] == "NOT_FOUND"

    assert _json(pia("admin", "release-store", "1004", "--tenant", tenant))["changed"] is True
    assert _json(pia("admin", "release-store", "1004", "--tenant", tenant))["status"] == "RELEASED"

    store = world["ecomStores"][0]["id"]
    secret = tmp_path / "secret"
    secret.write_text("webhook-signing-secret-0123\n")
    shown = _json(pia("admin", "set-event-destination", "--tenant", tenant, "--ecom-store", store, "--kind", "WEBHOOK",
                      "--webhook-url", "https://hooks.example.com/x", "--secret-file", str(secret)))
    assert shown["secretSet"] is True and "webhook-signing-secret" not in json.dumps(shown)
    assert _json(pia("admin", "event-destination", "--tenant", tenant, "--ecom-store", store)) == shown


class Served:
    """`pia serve` in its own process on an embedded DuckDB data dir, which it then holds."""

    def __init__(self, env: dict[str, str]) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.process = subprocess.Popen([PIA, "serve", "--port", self.url.rsplit(":", 1)[1]], env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.process.poll() is None:
            self.lines.append(self.process.stdout.readline())
            if "Running on" in self.lines[-1]:
                # Keep reading its log (access lines included), so a full pipe never blocks the server.
                self._reader.start()
                return
        self.stop()
        raise AssertionError("pia serve did not start:\n" + "".join(self.lines))

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        if self._reader.is_alive():
            self._reader.join(timeout=10)  # the rest of the log, up to the end of the pipe

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def logged(self) -> list[dict]:
        """Its log lines. They are JSON; DuckDB's bindings may print leak notices of their own at exit."""
        return [json.loads(line) for line in self.lines if line.startswith("{")]

    def requests(self) -> set[tuple[str, str]]:
        """(method, route template) of every request line it logged."""
        return {(line["method"], line["route"]) for line in self.logged() if line["event"] == "request"}


def _outbox_subjects(engine: sa.Engine, tenant: str) -> list[str]:
    """The tenant's event subjects in the order they were written (event ids are UUIDv7)."""
    with engine.connect() as conn:
        return list(conn.scalars(sa.select(event_outbox.c.subject).where(event_outbox.c.tenant_id == tenant)
                                 .order_by(event_outbox.c.event_id)))


def test_an_operator_changes_stock_while_pia_serve_holds_the_file(tmp_path) -> None:
    data_dir = tmp_path / "data"
    engine = create_engine(Settings(data_dir=data_dir))
    upgrade(engine)
    world = seed_demo_tenant(engine, "operator", is_test=False)
    tenant = world["id"]
    admin_id, admin_secret = issue_client(engine, tenant, "operator", "admin", None, ())
    seeded_events = _outbox_subjects(engine, tenant)
    engine.dispose()  # the file is the server's from now on
    env = {**os.environ, "PIA_DATA_DIR": str(data_dir), "PIA_DATABASE_URL": "", "PIA_ADMIN_URL": "",
           "PIA_ADMIN_CLIENT_ID": "", "PIA_ADMIN_CLIENT_SECRET": ""}

    def pia(*args: str, extra: dict[str, str] | None = None, stdin: str | None = None, expect: int = 0):
        done = subprocess.run([PIA, "admin", *args], env={**env, **(extra or {})}, input=stdin,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == expect, done.stdout + done.stderr
        return done

    server = Served(env)
    try:
        by_env = {"PIA_ADMIN_URL": server.url, "PIA_ADMIN_CLIENT_ID": admin_id,
                  "PIA_ADMIN_CLIENT_SECRET": admin_secret}
        adjust = ("stock", "adjust", "--tenant", tenant, "--location", "1001", "--sku", "100001")
        level = json.loads(pia(*adjust, "--delta", "4", extra=by_env).stdout)
        assert (level["onHand"], level["changed"]) == ("4", True)

        # The demo's credentials file names the admin client per tenant.
        credentials = tmp_path / "demo-credentials.json"
        credentials.write_text(json.dumps({"tenants": [{"id": tenant, "clients": [
            {"clientId": admin_id, "clientSecret": admin_secret, "scope": "admin", "resource": None}]}]}))
        by_file = ("--url", server.url, "--credentials", str(credentials))
        refused = pia(*adjust, "--delta", "-5", *by_file, expect=1)
        assert json.loads(refused.stderr)["details"]["errors"][0]["code"] == "NEGATIVE_ON_HAND"

        released = json.loads(pia("release-store", "1004", "--tenant", tenant, *by_file).stdout)
        assert (released["status"], released["changed"]) == ("RELEASED", True)
        document = tmp_path / "skus.json"
        document.write_text(json.dumps({"skus": [{"number": "OPS-1", "name": "Loaded over HTTP"}]}))
        assert json.loads(pia("load", str(document), "--tenant", tenant, *by_file).stdout)["changed"] is True

        store = world["ecomStores"][0]["id"]
        secret = "SharedAccessKey-for-the-operator-test="
        shown = pia("set-event-destination", "--tenant", tenant, "--ecom-store", store, "--kind", "SERVICE_BUS",
                    "--endpoint", "nordlys.servicebus.windows.net", "--entity-path", "events", "--key-name", "Send",
                    "--secret-file", "-", *by_file, stdin=secret + "\n")
        assert json.loads(shown.stdout)["secretSet"] is True and secret not in shown.stdout + shown.stderr

        wrong = pia(*adjust, "--delta", "1", extra={**by_env, "PIA_ADMIN_CLIENT_SECRET": "wrong"}, expect=1)
        assert json.loads(wrong.stderr)["error"] == "invalid_client"
        # Without a server to go through, the held file is refused with the way out named.
        direct = pia(*adjust, "--delta", "1", expect=1)
        assert "--url" in direct.stderr
    finally:
        server.stop()

    # The server is gone: the same command works on the file directly, after the server's changes.
    assert json.loads(pia(*adjust, "--delta", "1").stdout)["onHand"] == "5"
    assert ("POST", "/admin/v1/tenants/<tenantId>/stock_adjustments") in server.requests()
    assert secret not in server.log
    engine = create_engine(Settings(data_dir=data_dir))
    subjects = _outbox_subjects(engine, tenant)[len(seeded_events):]
    engine.dispose()
    assert subjects.count(events.RETAIL_STORE_UPDATED) == len(world["ecomStores"])


def test_an_admin_command_loads_neither_quart_nor_polars_nor_the_adbc_driver() -> None:
    """What a `pia admin` command works with is SQLAlchemy and pydantic; each of these cost every command's start-up
    0.2–0.5 s of CPU when imported on its way: Quart (through the routes' JSON helpers), Polars (PostgreSQL's bulk
    CSV) and the ADBC driver, whose DB-API module loads pyarrow.dataset and pandas."""
    unwanted = ("adbc_driver_postgresql.dbapi", "pandas", "quart", "polars")
    probe = f"import sys, serving.admin; print(sorted(set({unwanted}) & set(sys.modules)))"
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            timeout=120).stdout
    assert output.strip() == "[]"
