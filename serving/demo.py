"""`pia demo`: seed a demo tenant and a test tenant once, write their credentials, serve with every role in the
process (pipeline worker, order processor, event bridge, and the relay when Kafka is set), on either backend."""

from pathlib import Path
from typing import Any

import click
import orjson
import sqlalchemy as sa

from db.backoffice import load_document
from db.clients import DEMAND_PLANNING_PERMISSION
from db.engine import create_engine
from db.migrate import upgrade
from db.reference import list_ecom_stores, list_loyalty_programs
from db.tenants import create_tenant, get_tenant
from serving.admin import issue_client
from serving.demo_data import DEMO_PRODUCTS, TEST_PRODUCTS, demo_document
from serving.roles import Roles
from serving.server import base_url, run
from settings import Settings

CREDENTIALS_FILE = "demo-credentials.json"
DEMO_TENANTS = (("Nordlys Retail", False), ("Nordlys Retail (test)", True))


def _client(client_id: str, secret: str, scope: str, resource: str | None,
            permissions: tuple[str, ...]) -> dict[str, Any]:
    return {"clientId": client_id, "clientSecret": secret, "scope": scope, "resource": resource,
            "permissions": list(permissions)}


def seed_demo_tenant(engine: sa.Engine, name: str, is_test: bool, shop: bool = True) -> dict[str, Any]:
    """A tenant with the demo's back-office data and a client per scope; without `shop`, no web shop catalogue
    (for tests that build their own)."""
    tenant_id = create_tenant(engine, name, is_test)
    products = 0 if not shop else TEST_PRODUCTS if is_test else DEMO_PRODUCTS
    load_document(engine, tenant_id, demo_document(name, products, tenant_id))
    stores = list_ecom_stores(engine, tenant_id)
    programs = list_loyalty_programs(engine, tenant_id)
    wanted: list[tuple[str, str | None, tuple[str, ...]]] = [("ecom", s.id, ()) for s in stores]
    wanted += [("loyalty_programs", p.id, ()) for p in programs]
    wanted += [("demand_planning", None, (DEMAND_PLANNING_PERMISSION,)), ("demand_planning", None, ()),
               ("admin", None, ())]
    clients = []
    for scope, resource, permissions in wanted:
        label = f"demo {scope}" + (" with Demand Planning permission" if permissions else "")
        client_id, secret = issue_client(engine, tenant_id, label, scope, resource, permissions)
        clients.append(_client(client_id, secret, scope, resource, permissions))
    return {
        "id": tenant_id, "name": name, "test": is_test,
        "ecomStores": [{"id": s.id, "number": s.number, "released": s.released} for s in stores],
        "loyaltyPrograms": [{"id": p.id, "name": p.name} for p in programs],
        "clients": clients,
    }


def _reusable(engine: sa.Engine, path: Path) -> dict[str, Any] | None:
    """The credentials of an earlier run on this data dir, if its tenants are still in the store."""
    if not path.exists():
        return None
    credentials = orjson.loads(path.read_bytes())
    if all(get_tenant(engine, tenant["id"]) for tenant in credentials["tenants"]):
        return credentials
    return None


def _curl(credentials: dict[str, Any]) -> str:
    tenant = credentials["tenants"][0]
    client = next(c for c in tenant["clients"] if DEMAND_PLANNING_PERMISSION in c["permissions"])
    return (f"curl -s -u '{client['clientId']}:{client['clientSecret']}' {credentials['tokenUrl']} "
            f"-d grant_type=client_credentials -d scope=demand_planning -d tenant_id={tenant['id']}")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=int)
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("pia-data"),
              show_default=True)
def demo(host: str, port: int, data_dir: Path) -> None:
    """Seed demo data on first run (reuse it after), write DIR/demo-credentials.json and serve with every role in
    this process: the embedded DuckDB file by default, PostgreSQL when PIA_DATABASE_URL names one."""
    settings = Settings(data_dir=data_dir)
    engine = create_engine(settings)
    upgrade(engine)
    path = data_dir / CREDENTIALS_FILE
    credentials = _reusable(engine, path)
    if credentials is None:
        credentials = {"tenants": [seed_demo_tenant(engine, name, test) for name, test in DEMO_TENANTS]}
        click.echo(f"seeded {len(DEMO_TENANTS)} tenants into {data_dir}")
    else:
        click.echo(f"reusing the demo data in {data_dir}")
    url = base_url(host, port)
    credentials = {"baseUrl": url, "tokenUrl": f"{url}/oauth2/token", "tenants": credentials["tenants"]}
    path.write_bytes(orjson.dumps(credentials, option=orjson.OPT_INDENT_2))
    path.chmod(0o600)  # it holds client secrets
    click.echo(f"credentials: {path}\nget a token:\n  {_curl(credentials)}\noperator console: {url}/console/ "
               "(sign in with an admin client of the credentials)")
    run(settings, engine, host, port, Roles.everything(settings))
