"""`pia admin`: tenants, API clients, signing and secret keys, back-office data and the audit trail.

Output is JSON, so operators can read it and scripts can parse it.
"""

import sys
from pathlib import Path
from typing import Any

import click
import orjson
import sqlalchemy as sa

from contracts.rendering import instant
from serving.credentials import hash_secret, new_secret
from serving.tokens import rotate_signing_key
from settings import Settings
from store.audit import client_events
from store.backoffice import DocumentInvalid, load_document
from store.clients import (
    DEMAND_PLANNING_PERMISSION,
    SCOPES,
    Client,
    ClientRejected,
    create_client,
    find_client,
    list_clients,
    update_client,
)
from store.engine import create_engine
from store.migrate import upgrade
from store.secrets import SecretBox, SecretKeyError, new_secret_key, reseal_all, secret_box
from store.signing_keys import prepare_signing_keys
from store.tenants import create_tenant, get_tenant, list_tenants


def _engine() -> sa.Engine:
    engine = create_engine(Settings())
    upgrade(engine)
    return engine


def _secret_box(engine: sa.Engine) -> SecretBox:
    """The configured secret key, checked against the stored keys (which it seals if still in plain text)."""
    try:
        box = secret_box(Settings())
        prepare_signing_keys(engine, box)
    except SecretKeyError as error:
        raise click.ClickException(str(error)) from None
    return box


def _echo(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def _client_json(client: Client) -> dict[str, Any]:
    return {"clientId": client.id, "tenantId": client.tenant_id, "name": client.name, "scope": client.scope,
            "resource": client.resource_id, "permissions": list(client.permissions),
            "enabled": client.enabled, "rateLimitPerMinute": client.rate_limit_per_minute}


def _require_tenant(engine: sa.Engine, tenant_id: str) -> None:
    if get_tenant(engine, tenant_id) is None:
        raise click.ClickException(f"no tenant {tenant_id}")


def _require_client(engine: sa.Engine, client_id: str) -> Client:
    client = find_client(engine, client_id)
    if client is None:
        raise click.ClickException(f"no API client {client_id}")
    return client


def issue_client(engine: sa.Engine, tenant_id: str, name: str, scope: str, resource: str | None,
                 permissions: tuple[str, ...]) -> tuple[str, str]:
    """Create a client; returns (client id, secret). The secret exists only in this return value."""
    secret = new_secret()
    client_id = create_client(engine, tenant_id, name=name, scope=scope, resource_id=resource,
                              permissions=permissions, secret_hash=hash_secret(secret))
    return client_id, secret


@click.group()
def admin() -> None:
    """Operate tenants, API clients, signing keys and back-office data."""


@admin.command("create-tenant")
@click.argument("name")
@click.option("--test", "is_test", is_flag=True, help="A test tenant: separate data, same host.")
def create_tenant_command(name: str, is_test: bool) -> None:
    tenant_id = create_tenant(_engine(), name, is_test)
    _echo({"tenantId": tenant_id, "name": name, "test": is_test})


@admin.command("list-tenants")
def list_tenants_command() -> None:
    _echo([{"tenantId": t.id, "name": t.name, "test": t.is_test, "createdTime": instant(t.created_time)}
           for t in list_tenants(_engine())])


@admin.command("create-client")
@click.option("--tenant", "tenant_id", required=True)
@click.option("--scope", type=click.Choice(SCOPES), required=True)
@click.option("--resource", help="eCom store id (ecom) or loyalty program id (loyalty_programs).")
@click.option("--name", default="", help="What the client is for.")
@click.option("--demand-planning-permission", is_flag=True,
              help="Grant the Demand Planning permission (demand_planning scope).")
def create_client_command(tenant_id: str, scope: str, resource: str | None, name: str,
                          demand_planning_permission: bool) -> None:
    """Create an API client; its secret is printed once and never again."""
    engine = _engine()
    _require_tenant(engine, tenant_id)
    if demand_planning_permission and scope != "demand_planning":
        raise click.ClickException("the Demand Planning permission belongs to demand_planning clients")
    permissions = (DEMAND_PLANNING_PERMISSION,) if demand_planning_permission else ()
    try:
        client_id, secret = issue_client(engine, tenant_id, name or f"{scope} client", scope, resource,
                                         permissions)
    except ClientRejected as error:
        raise click.ClickException(str(error)) from None
    _echo({"clientId": client_id, "clientSecret": secret, "tenantId": tenant_id, "scope": scope,
           "resource": resource, "permissions": list(permissions)})
    click.echo("The secret is shown only now; store it in a secret manager.", err=True)


@admin.command("list-clients")
@click.option("--tenant", "tenant_id", required=True)
def list_clients_command(tenant_id: str) -> None:
    engine = _engine()
    _require_tenant(engine, tenant_id)
    _echo([_client_json(client) for client in list_clients(engine, tenant_id)])


def _set_client(client_id: str, **values: Any) -> None:
    engine = _engine()
    client = _require_client(engine, client_id)
    update_client(engine, client.tenant_id, client.id, **values)
    _echo(_client_json(_require_client(engine, client_id)))


@admin.command("disable-client")
@click.argument("client_id")
def disable_client_command(client_id: str) -> None:
    """Refuse new tokens and the tokens already issued to the client."""
    _set_client(client_id, enabled=False)


@admin.command("enable-client")
@click.argument("client_id")
def enable_client_command(client_id: str) -> None:
    _set_client(client_id, enabled=True)


@admin.command("set-rate-limit")
@click.argument("client_id")
@click.argument("per_minute", required=False, type=click.IntRange(min=1))
@click.option("--default", "use_default", is_flag=True, help="Go back to the service default.")
def set_rate_limit_command(client_id: str, per_minute: int | None, use_default: bool) -> None:
    """Override the client's requests per rolling 60 seconds."""
    if (per_minute is None) == (not use_default):
        raise click.UsageError("give PER_MINUTE or --default")
    _set_client(client_id, rate_limit_per_minute=per_minute)


@admin.command("rotate-key")
def rotate_key_command() -> None:
    """New token signing key; tokens signed with the old one stay valid until they expire."""
    engine = _engine()
    _echo({"kid": rotate_signing_key(engine, _secret_box(engine))})


@admin.command("new-secret-key")
def new_secret_key_command() -> None:
    """Print a new key for PIA_SECRET_KEY (nothing is stored)."""
    _echo({"secretKey": new_secret_key()})


@admin.command("rotate-secret-key")
def rotate_secret_key_command() -> None:
    """Re-encrypt every stored secret with the first key of PIA_SECRET_KEY.

    Set PIA_SECRET_KEY=NEW,OLD everywhere, run this once, then drop OLD.
    """
    engine = _engine()
    _echo({"resealed": reseal_all(engine, _secret_box(engine))})


@admin.command("load")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tenant", "tenant_id", required=True)
def load_command(file: Path, tenant_id: str) -> None:
    """Load back-office data (contracts/backoffice.schema.json); all or nothing."""
    engine = _engine()
    _require_tenant(engine, tenant_id)
    try:
        document = orjson.loads(file.read_bytes())
    except orjson.JSONDecodeError as error:
        raise click.ClickException(f"{file}: not valid JSON: {error}") from None
    try:
        report = load_document(engine, tenant_id, document)
    except DocumentInvalid as invalid:
        for problem in invalid.errors:
            click.echo(f"{problem.path or '$'}: {problem.message}", err=True)
        click.echo(f"{file}: {len(invalid.errors)} problem(s); nothing was loaded.", err=True)
        sys.exit(1)
    _echo({"changed": report.changed, "counts": report.counts})


@admin.command("audit")
@click.option("--client", "client_id", required=True)
@click.option("--limit", default=100, show_default=True, type=click.IntRange(min=1))
def audit_command(client_id: str, limit: int) -> None:
    """The client's newest authenticated requests, newest first."""
    engine = _engine()
    client = _require_client(engine, client_id)
    _echo([{"time": instant(e.time), "clientId": e.client_id, "tokenId": e.token_id,
            "requestId": e.request_id, "method": e.method, "path": e.path, "status": e.status,
            "durationMs": e.duration_ms} for e in client_events(engine, client.tenant_id, client.id, limit)])
