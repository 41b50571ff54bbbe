"""`pia admin`: tenants, API clients, signing and secret keys, back-office data and the audit trail.

Output is JSON, so operators can read it and scripts can parse it. The back-office commands (load, stock adjust,
release-store, event destinations, order) go through a running server's admin API when given --url (or PIA_ADMIN_URL),
so they work while `pia serve` holds the embedded DuckDB file; without it they run the same operations on the
database directly.
"""

import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn, TextIO
from urllib.parse import quote, urlencode

import click
import duckdb
import httpx
import orjson
import sqlalchemy as sa

from contracts.admin import DESTINATION_KINDS, LOCATION_TYPES
from contracts.errors import ApiError
from contracts.rendering import instant
from db.clients import (
    DEMAND_PLANNING_PERMISSION,
    SCOPES,
    Client,
    ClientRejected,
    create_client,
    find_client,
    list_clients,
    update_client,
)
from db.engine import create_engine
from db.secrets import SecretBox, SecretKeyError, new_secret_key, reseal_all, secret_box
from db.signing_keys import prepare_signing_keys
from db.tenants import create_tenant, get_tenant, list_tenants
from rules.retry import RetryPolicy
from serving.admin_client import (
    AdminCallFailed,
    AdminClient,
    AdminCredentials,
    CredentialsMissing,
    credentials_from_file,
)
from serving.credentials import hash_secret, new_secret
from serving.tokens import rotate_signing_key
from settings import Settings


def _engine() -> sa.Engine:
    from db.migrate import upgrade  # Alembic: only the commands that work on the database directly need it

    settings = Settings()
    engine = create_engine(settings)
    try:
        upgrade(engine)
    except sa.exc.OperationalError as error:
        if settings.is_embedded and isinstance(error.orig, duckdb.IOException):
            # The embedded file has one owner at a time: usually `pia serve` running on this data dir.
            raise click.ClickException(f"{error.orig}\nAnother process holds the database: pass --url (or set "
                                       "PIA_ADMIN_URL) to go through that server's admin API.") from None
        raise
    return engine


def _operations() -> ModuleType:
    """serving.admin_operations, imported by the commands that work on the database directly: the back office's
    loading and Arrow come with it, half a second of a command's start that one given --url does not need."""
    from serving import admin_operations

    return admin_operations


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


def _api_options(command: Callable[..., None]) -> Callable[..., None]:
    """--url and --credentials: go through a running server's admin API instead of the database."""
    command = click.option("--credentials", "credentials_file", type=click.Path(exists=True, dir_okay=False,
                                                                                path_type=Path),
                           help="JSON file with the admin client: demo-credentials.json or create-client's "
                                "output. Default: PIA_ADMIN_CLIENT_ID and PIA_ADMIN_CLIENT_SECRET.")(command)
    return click.option("--url", help="Base URL of a running pia server (default: PIA_ADMIN_URL); without it "
                                      "the command works on the database directly.")(command)


def _admin_client(url: str, tenant_id: str, credentials_file: Path | None) -> AdminClient:
    settings = Settings()
    try:
        if credentials_file is not None:
            credentials = credentials_from_file(credentials_file, tenant_id)
        elif settings.admin.client_id and settings.admin.client_secret.get_secret_value():
            credentials = AdminCredentials(settings.admin.client_id,
                                           settings.admin.client_secret.get_secret_value())
        else:
            raise CredentialsMissing("set PIA_ADMIN_CLIENT_ID and PIA_ADMIN_CLIENT_SECRET or pass --credentials "
                                     "FILE (an admin-scope client: pia admin create-client --scope admin)")
    except (CredentialsMissing, orjson.JSONDecodeError, KeyError) as error:
        raise click.ClickException(f"no admin credentials: {error}") from None
    return AdminClient(url, tenant_id, credentials)


def _perform(tenant_id: str, url: str | None, credentials_file: Path | None, method: str, path: str, body: Any,
             direct: Callable[[sa.Engine], Any], shown: Callable[[Any], Any] = lambda answer: answer) -> None:
    """Run one admin operation through the server's API at `url`, or with `direct` on the database; print the
    answer (as `shown` makes it: a 204 has none), or the error body on stderr with exit status 1."""
    url = url or Settings().admin.url
    try:
        if url:
            with _admin_client(url, tenant_id, credentials_file) as client:
                answer = client.call(method, path, body)
        else:
            engine = _engine()
            _require_tenant(engine, tenant_id)
            answer = direct(engine)
    except AdminCallFailed as failed:
        _fail(failed.body)
    except ApiError as error:
        _fail(error.body())
    except httpx.TransportError as error:
        raise click.ClickException(f"cannot reach {url}: {error}") from None
    _echo(shown(answer))


def _body(**fields: Any) -> dict[str, Any]:
    """A request body of the options given (None: not given, left out)."""
    return {name: value for name, value in fields.items() if value is not None}


def _fail(body: Any) -> NoReturn:
    click.echo(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode(), err=True)
    sys.exit(1)


@admin.command("load")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tenant", "tenant_id", required=True)
@_api_options
def load_command(file: Path, tenant_id: str, url: str | None, credentials_file: Path | None) -> None:
    """Load back-office data (contracts/backoffice.schema.json); all or nothing."""
    try:
        document = orjson.loads(file.read_bytes())
    except orjson.JSONDecodeError as error:
        raise click.ClickException(f"{file}: not valid JSON: {error}") from None
    _perform(tenant_id, url, credentials_file, "POST", "/backoffice", document,
             lambda engine: _operations().load(engine, tenant_id, document))


@admin.group("stock")
def stock() -> None:
    """Stock on hand at warehouses and retail stores."""


@stock.command("adjust")
@click.option("--tenant", "tenant_id", required=True)
@click.option("--location", "location_number", required=True, help="Warehouse or retail store number.")
@click.option("--location-type", type=click.Choice(LOCATION_TYPES),
              help="Only when a warehouse and a retail store share the number.")
@click.option("--sku", "sku_number", required=True, help="SKU number.")
@click.option("--delta", help="Add this to on hand (negative to remove), e.g. 5 or -2.")
@click.option("--on-hand", help="Set on hand to this counted quantity.")
@click.option("--reason", help="Why (goes to the server log).")
@_api_options
def stock_adjust_command(tenant_id: str, location_number: str, location_type: str | None, sku_number: str,
                         delta: str | None, on_hand: str | None, reason: str | None, url: str | None,
                         credentials_file: Path | None) -> None:
    """Adjust on hand of a SKU at a location (refuses negative stock); below what is reserved, the shortfall is taken
    back from the newest reservations there, and the answer lists them."""
    body = _body(locationNumber=location_number, locationType=location_type, skuNumber=sku_number,
                 onHandDelta=delta, onHand=on_hand, reason=reason)
    _perform(tenant_id, url, credentials_file, "POST", "/stock_adjustments", body,
             lambda engine: _operations().adjust(engine, tenant_id, body))


@admin.command("release-store")
@click.argument("number")
@click.option("--tenant", "tenant_id", required=True)
@_api_options
def release_store_command(number: str, tenant_id: str, url: str | None, credentials_file: Path | None) -> None:
    """Release a retail store (RetailStoreUpdated to the eCom stores of its company)."""
    _perform(tenant_id, url, credentials_file, "POST", f"/retail_stores/{quote(number, safe='')}/release", None,
             lambda engine: _operations().release(engine, tenant_id, number))


@admin.command("set-event-destination")
@click.option("--tenant", "tenant_id", required=True)
@click.option("--ecom-store", "ecom_store_id", required=True, help="eCom store id.")
@click.option("--kind", type=click.Choice(DESTINATION_KINDS), required=True)
@click.option("--endpoint", help="SERVICE_BUS: the namespace host name.")
@click.option("--entity-path", help="SERVICE_BUS: the queue or topic.")
@click.option("--key-name", help="SERVICE_BUS: the shared access policy name.")
@click.option("--webhook-url", help="WEBHOOK: the https URL events are posted to.")
@click.option("--secret-file", type=click.File("r"),
              help="File (or - for stdin) holding the shared access key or webhook secret; else prompted for.")
@_api_options
def set_event_destination_command(tenant_id: str, ecom_store_id: str, kind: str, endpoint: str | None,
                                  entity_path: str | None, key_name: str | None, webhook_url: str | None,
                                  secret_file: TextIO | None, url: str | None,
                                  credentials_file: Path | None) -> None:
    """Set where an eCom store's events go; the secret is never taken on the command line or printed."""
    secret = secret_file.read().strip() if secret_file else click.prompt("Secret", hide_input=True)
    if kind == "SERVICE_BUS":
        body = _body(kind=kind, endpoint=endpoint, entityPath=entity_path, sharedAccessKeyName=key_name,
                     sharedAccessKey=secret)
    else:
        body = _body(kind=kind, url=webhook_url, secret=secret)
    _perform(tenant_id, url, credentials_file, "PUT", f"/ecom_stores/{quote(ecom_store_id, safe='')}/event_destination",
             body, lambda engine: _operations().put_destination(engine, _secret_box(engine), tenant_id,
                                                                ecom_store_id, body))


@admin.command("event-destination")
@click.option("--tenant", "tenant_id", required=True)
@click.option("--ecom-store", "ecom_store_id", required=True, help="eCom store id.")
@click.option("--remove", is_flag=True, help="Remove it: the store's events still to deliver are discarded, and a "
                                             "destination set later gets only events written after it.")
@_api_options
def event_destination_command(tenant_id: str, ecom_store_id: str, remove: bool, url: str | None,
                              credentials_file: Path | None) -> None:
    """Show an eCom store's event destination (never its secret), or remove it."""
    path = f"/ecom_stores/{quote(ecom_store_id, safe='')}/event_destination"
    if remove:
        _perform(tenant_id, url, credentials_file, "DELETE", path, None,
                 lambda engine: _operations().delete_destination(engine, tenant_id, ecom_store_id),
                 shown=lambda _: {"ecomStoreId": ecom_store_id, "removed": True})
    else:
        _perform(tenant_id, url, credentials_file, "GET", path, None,
                 lambda engine: _operations().show_destination(engine, tenant_id, ecom_store_id))


@admin.group("events")
def events() -> None:
    """Delivery of an eCom store's change events: its state, its dead letters, and replaying them."""


def _events_path(ecom_store_id: str, rest: str) -> str:
    return f"/ecom_stores/{quote(ecom_store_id, safe='')}{rest}"


@events.command("status")
@click.option("--tenant", "tenant_id", required=True)
@click.option("--ecom-store", "ecom_store_id", required=True, help="eCom store id.")
@_api_options
def events_status_command(tenant_id: str, ecom_store_id: str, url: str | None, credentials_file: Path | None) -> None:
    """Backlog, dead letters, last delivery and failures of the eCom store's events."""
    _perform(tenant_id, url, credentials_file, "GET", _events_path(ecom_store_id, "/event_delivery"), None,
             lambda engine: _operations().event_delivery(engine, tenant_id, ecom_store_id))


@events.command("dead-letters")
@click.option("--tenant", "tenant_id", required=True)
@click.option("--ecom-store", "ecom_store_id", required=True, help="eCom store id.")
@click.option("--limit", type=click.IntRange(min=1), help="Page size (default 1,000).")
@click.option("--after", help="nextAfter of the previous page.")
@click.option("--answer", help="Only those whose last error contains this text, such as 'answered 500'.")
@_api_options
def events_dead_letters_command(tenant_id: str, ecom_store_id: str, limit: int | None, after: str | None,
                                answer: str | None, url: str | None, credentials_file: Path | None) -> None:
    """The events the bridge gave up on, newest first."""
    query = _body(limit=None if limit is None else str(limit), after=after, answer=answer)
    _perform(tenant_id, url, credentials_file, "GET", _events_path(ecom_store_id, f"/dead_letters?{urlencode(query)}"),
             None, lambda engine: _operations().list_dead_letters(engine, tenant_id, ecom_store_id, query))


@events.command("replay")
@click.option("--tenant", "tenant_id", required=True)
@click.option("--ecom-store", "ecom_store_id", required=True, help="eCom store id.")
@click.option("--event", "event_ids", multiple=True, help="A dead letter's event id (repeat for more).")
@click.option("--all", "replay_all", is_flag=True, help="Every dead letter of the eCom store.")
@_api_options
def events_replay_command(tenant_id: str, ecom_store_id: str, event_ids: tuple[str, ...], replay_all: bool,
                          url: str | None, credentials_file: Path | None) -> None:
    """Deliver dead letters again, from their first attempt; prints how many were replayed."""
    if bool(event_ids) == replay_all:
        raise click.UsageError("give --event (one or more) or --all")
    body = {} if replay_all else {"eventIds": list(event_ids)}
    _perform(tenant_id, url, credentials_file, "POST", _events_path(ecom_store_id, "/dead_letters/replay"), body,
             lambda engine: _operations().replay(engine, tenant_id, ecom_store_id, body))


@admin.group("order")
def order() -> None:
    """Move an order through picking, shipping, returns and cancelling; each prints the order record after it."""


def _order_path(order_key: str, action: str = "") -> str:
    return f"/orders/{quote(order_key, safe='')}{action}"


def _line_units(_: click.Context, __: click.Parameter, values: tuple[str, ...]) -> list[dict[str, str]] | None:
    """--line LINE_ITEM_ID=QTY, as the request's lines (None: none given); the operation checks the quantity and
    names it by its path (lines[0].quantity is the first --line)."""
    lines = []
    for value in values:
        line_item_id, separator, quantity = value.partition("=")
        if not (separator and line_item_id.strip() and quantity.strip()):
            raise click.BadParameter(f"{value!r} is not LINE_ITEM_ID=QTY")
        lines.append({"lineItemId": line_item_id.strip(), "quantity": quantity.strip()})
    return lines or None


def _lines_option(command: Callable[..., None]) -> Callable[..., None]:
    return click.option("--line", "lines", multiple=True, callback=_line_units, metavar="LINE_ITEM_ID=QTY",
                        help="Units of one line item (repeat for more); without it, every unit there is.")(command)




@order.command("list")
@click.option("--tenant", "tenant_id", required=True)
@click.option("--processing", type=click.Choice(("FAILED", "RETRYING")), default="FAILED", show_default=True,
              help="FAILED: parked, waiting for a retry; RETRYING: failed, tried again after a backoff.")
@click.option("--limit", type=click.IntRange(min=1), help="Page size (default 1,000).")
@click.option("--after", help="nextAfter of the previous page.")
@_api_options
def order_list_command(tenant_id: str, processing: str, limit: int | None, after: str | None, url: str | None,
                       credentials_file: Path | None) -> None:
    """RECEIVED orders that failed to open, with their attempts and last error."""
    query = _body(processing=processing, limit=None if limit is None else str(limit), after=after)
    _perform(tenant_id, url, credentials_file, "GET", f"/orders?{urlencode(query)}", None,
             lambda engine: _operations().list_failed_orders(engine, tenant_id, query))


@order.command("retry")
@click.argument("order_key", metavar="ORDER")
@click.option("--tenant", "tenant_id", required=True)
@_api_options
def order_retry_command(order_key: str, tenant_id: str, url: str | None, credentials_file: Path | None) -> None:
    """Try to open a RECEIVED order now, its failed attempts counted from zero; prints its processing state."""
    _perform(tenant_id, url, credentials_file, "POST", _order_path(order_key, "/retry"), None,
             lambda engine: _operations().retry_failed_order(engine, RetryPolicy.of(Settings().order), tenant_id,
                                                           order_key))


@order.command("show")
@click.argument("order_key", metavar="ORDER")
@click.option("--tenant", "tenant_id", required=True)
@_api_options
def order_show_command(order_key: str, tenant_id: str, url: str | None, credentials_file: Path | None) -> None:
    """Show the order (id or number) with its documents."""
    _perform(tenant_id, url, credentials_file, "GET", _order_path(order_key), None,
             lambda engine: _operations().show_order(engine, tenant_id, order_key))


@order.command("pick")
@click.argument("order_key", metavar="ORDER")
@click.option("--tenant", "tenant_id", required=True)
@_lines_option
@_api_options
def order_pick_command(order_key: str, tenant_id: str, lines: list[dict[str, str]] | None, url: str | None,
                       credentials_file: Path | None) -> None:
    """Pick units: a capture on an eCom store with payment capture, else a receipt and invoice."""
    body = _body(lines=lines)
    _perform(tenant_id, url, credentials_file, "POST", _order_path(order_key, "/pick"), body,
             lambda engine: _operations().pick_order(engine, tenant_id, order_key, body))


@order.command("ship")
@click.argument("order_key", metavar="ORDER")
@click.option("--tenant", "tenant_id", required=True)
@click.option("--receipt", "receipt_id", help="The receipt to ship.")
@click.option("--capture", "capture_id", help="Ship the receipt of this CONFIRMED capture.")
@click.option("--carrier")
@click.option("--tracking-number")
@_api_options
def order_ship_command(order_key: str, tenant_id: str, receipt_id: str | None, capture_id: str | None,
                       carrier: str | None, tracking_number: str | None, url: str | None,
                       credentials_file: Path | None) -> None:
    """Ship a receipt (give --receipt or --capture)."""
    if (receipt_id is None) == (capture_id is None):
        raise click.UsageError("give exactly one of --receipt and --capture")
    body = _body(receiptId=receipt_id, captureId=capture_id, carrier=carrier, trackingNumber=tracking_number)
    _perform(tenant_id, url, credentials_file, "POST", _order_path(order_key, "/ship"), body,
             lambda engine: _operations().ship_order(engine, tenant_id, order_key, body))


@order.command("return")
@click.argument("order_key", metavar="ORDER")
@click.option("--tenant", "tenant_id", required=True)
@_lines_option
@click.option("--invoice", "invoice_id", help="Return against this invoice only (default: oldest first).")
@_api_options
def order_return_command(order_key: str, tenant_id: str, lines: list[dict[str, str]] | None, invoice_id: str | None,
                         url: str | None, credentials_file: Path | None) -> None:
    """Take delivered units back: a return invoice and an OPEN refund per invoice; units back on hand."""
    body = _body(lines=lines, invoiceId=invoice_id)
    _perform(tenant_id, url, credentials_file, "POST", _order_path(order_key, "/returns"), body,
             lambda engine: _operations().return_order_units(engine, tenant_id, order_key, body))


@order.command("cancel")
@click.argument("order_key", metavar="ORDER")
@click.option("--tenant", "tenant_id", required=True)
@_lines_option
@_api_options
def order_cancel_command(order_key: str, tenant_id: str, lines: list[dict[str, str]] | None, url: str | None,
                         credentials_file: Path | None) -> None:
    """Cancel open units (the whole order when nothing was delivered); their reservation is released."""
    body = _body(lines=lines)
    _perform(tenant_id, url, credentials_file, "POST", _order_path(order_key, "/cancel"), body,
             lambda engine: _operations().cancel_order(engine, tenant_id, order_key, body))


@admin.group("cnc")
def cnc() -> None:
    """Click and collect carts (parked at a retail store's POS): show, collect or cancel one by its parkedCartId."""


def _cart_command(action: str, operation: str, help_text: str) -> None:
    """`pia admin cnc ACTION`, which runs serving.admin_operations' `operation` when it works on the database."""
    @cnc.command(action, help=help_text)
    @click.argument("parked_cart_id", metavar="PARKED_CART_ID")
    @click.option("--tenant", "tenant_id", required=True)
    @_api_options
    def command(parked_cart_id: str, tenant_id: str, url: str | None, credentials_file: Path | None) -> None:
        path = f"/click_and_collect/{quote(parked_cart_id, safe='')}" + ("" if action == "show" else f"/{action}")
        hold = timedelta(hours=Settings().click_and_collect_hold_hours)
        _perform(tenant_id, url, credentials_file, "GET" if action == "show" else "POST", path, None,
                 lambda engine: getattr(_operations(), operation)(engine, tenant_id, parked_cart_id, hold))


_cart_command("show", "show_cart", "Show the cart: its state and each line, where it is reserved.")
_cart_command("collect", "collect_cart",
              "The customer took the goods: the reserved units leave stock (again: the same answer).")
_cart_command("cancel", "cancel_cart",
              "Cancel the cart: its reservations are released (again: the same answer).")


@admin.command("audit")
@click.option("--client", "client_id", required=True)
@click.option("--limit", default=100, show_default=True, type=click.IntRange(min=1))
def audit_command(client_id: str, limit: int) -> None:
    """The client's newest authenticated requests, newest first."""
    from db.audit import client_events  # the audit writer's module: Arrow and psycopg, which no other command needs

    engine = _engine()
    client = _require_client(engine, client_id)
    _echo([{"time": instant(e.time), "clientId": e.client_id, "tokenId": e.token_id,
            "requestId": e.request_id, "method": e.method, "path": e.path, "status": e.status,
            "durationMs": e.duration_ms} for e in client_events(engine, client.tenant_id, client.id, limit)])
