"""The operator console at /console/: server-rendered pages for an admin client's tenant.

Every page but sign-in needs a live session (serving/console/sessions.py) and shows only its client's tenant; the
actions (rerun a batch, replay dead letters, retry an order, collect or cancel a cart) run the admin API's own
operations (serving/admin_operations.py).
No inline script or style anywhere: the Content-Security-Policy allows only the console's own files.
"""

from datetime import datetime, timedelta
from typing import Any

from quart import Blueprint, Response, g, redirect, render_template, request, url_for

from contracts.batch_kinds import BATCH_KINDS, SALES_FORECAST
from contracts.errors import ApiError, BadRequest, NotFound
from db.console_sessions import end_session, start_session
from db.ids import utc_now
from db.tenants import get_tenant
from rules.retry import RetryPolicy
from serving import admin_operations
from serving.client_authentication import AttemptThrottled, AuthenticationFailed, authenticate_client
from serving.console import pages
from serving.console.sessions import (
    CSRF_FIELD,
    SAFE_METHODS,
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    SIGN_IN_COOKIE_SECONDS,
    SignedIn,
    SignedOut,
    check_form,
    csrf_token,
    forget_cookie,
    on_plain_local_http,
    set_cookie,
    sign_in_secret,
    signed_in,
)
from serving.request_checks import check_request
from serving.services import services
from serving.threads import blocking
from serving.validation import validated

blueprint = Blueprint("console", __name__, url_prefix="/console", template_folder="templates",
                      static_folder="static")
_OPEN_ENDPOINTS = {"console.sign_in", "console.static"}
# Only the console's own files; forms post to it alone; no page may frame it.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


@blueprint.before_request
async def require_session() -> None:
    if request.endpoint not in _OPEN_ENDPOINTS:
        await signed_in()
        # As the API's routes: a path parameter with a control character is 400.
        await check_request(request._get_current_object())


@blueprint.after_request
async def secure_headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    # same-origin, not no-referrer: under no-referrer browsers send `Origin: null`, which the form check refuses.
    response.headers["Referrer-Policy"] = "same-origin"
    if request.endpoint != "console.static":
        response.headers["Cache-Control"] = "no-store"
    return response


@blueprint.context_processor
async def console_context() -> dict[str, Any]:
    return {"signed": g.get("console"), "csrf_field": CSRF_FIELD}


@blueprint.errorhandler(SignedOut)
async def signed_out(error: SignedOut) -> Response:
    """To the sign-in page: a page asked for directly comes back after it; htmx follows HX-Redirect."""
    target = url_for("console.sign_in", next=request.path if request.method in SAFE_METHODS else None)
    if request.headers.get("HX-Request"):
        return Response("", 401, {"HX-Redirect": target})
    if request.method in SAFE_METHODS:
        return redirect(target, 303)
    return await _error_page(error)


@blueprint.errorhandler(ApiError)
async def refused(error: ApiError) -> Response:
    return await _error_page(error)


async def _error_page(error: ApiError) -> Response:
    signed: SignedIn | None = g.get("console")
    body = await render_template("console/error.html", error=error,
                                 tenant_name=await _tenant_name(signed) if signed else None)
    return Response(body, error.status, {**error.headers, "Content-Type": "text/html; charset=utf-8"})


async def _tenant_name(signed: SignedIn) -> str:
    tenant = await blocking(get_tenant, services().engine, signed.tenant_id)
    return tenant.name if tenant else signed.tenant_id


async def _page(template: str, **context: Any) -> str:
    return await render_template(template, tenant_name=await _tenant_name(g.console), **context)


# Signing in and out


def _next_page(value: str | None) -> str:
    """Where to go after signing in: a console page, never another site."""
    if value and value.startswith("/console/") and "//" not in value and "\\" not in value:
        return value
    return url_for("console.overview")


async def _sign_in_form(message: str | None = None, status: int = 200, headers: dict[str, str] | None = None,
                        client_id: str = "") -> Response:
    secret, new = sign_in_secret()
    body = await render_template("console/sign_in.html", csrf_token=csrf_token(secret),
                                 message=message, client_id=client_id, next_page=_next_page(request.args.get("next")),
                                 needs_https=not on_plain_local_http() and request.scheme != "https")
    response = Response(body, status, {**(headers or {}), "Content-Type": "text/html; charset=utf-8"})
    if new:
        set_cookie(response, SIGN_IN_COOKIE, secret, SIGN_IN_COOKIE_SECONDS)
    return response


@blueprint.route("/sign-in", methods=["GET", "POST"])
async def sign_in() -> Response:
    """An admin client's id and secret, checked as the token endpoint checks them (argon2, attempt budgets)."""
    if request.method == "GET":
        return await _sign_in_form()
    await check_form(request.cookies.get(SIGN_IN_COOKIE))
    form = await request.form
    client_id, secret = form.get("client_id", "").strip(), form.get("client_secret", "")
    if not client_id or not secret:
        return await _sign_in_form("Give the admin client's id and secret.", 400, client_id=client_id)
    try:
        client = await authenticate_client(None, client_id, secret, request.remote_addr)
    except AttemptThrottled as throttled:
        return await _sign_in_form(str(throttled), 429, {"Retry-After": str(throttled.retry_after_seconds)},
                                   client_id)
    except AuthenticationFailed as failed:
        return await _sign_in_form(f"{failed} Check the client id and secret.", 401, client_id=client_id)
    if client.scope != "admin":
        return await _sign_in_form(f"This is a {client.scope} client; only admin clients may use the console.",
                                   403, client_id=client_id)
    lifetime = services().settings.console_session_seconds
    session_id, _ = await blocking(start_session, services().engine, client.tenant_id, client.id,
                                   timedelta(seconds=lifetime), utc_now())
    response = redirect(_next_page(form.get("next")), 303)
    set_cookie(response, SESSION_COOKIE, session_id, lifetime)
    forget_cookie(response, SIGN_IN_COOKIE)
    return response


@blueprint.post("/sign-out")
async def sign_out() -> Response:
    """Ends the session at the server (every replica), then forgets the cookie."""
    await blocking(end_session, services().engine, request.cookies[SESSION_COOKIE])
    response = redirect(url_for("console.sign_in"), 303)
    forget_cookie(response, SESSION_COOKIE)
    return response


# Pages


@blueprint.get("/")
async def overview() -> str:
    checks = await blocking(pages.overview, services().engine, services().settings, g.console.tenant_id)
    return await _page("console/overview.html", checks=checks, checked_at=utc_now())


@blueprint.get("/batches")
async def batches() -> str:
    kind = request.args.get("kind", SALES_FORECAST)
    if kind not in BATCH_KINDS:
        raise BadRequest(f"kind must be one of {', '.join(BATCH_KINDS)}.")
    before = _instant_arg("before")
    runs, next_before, chart = await blocking(pages.batch_runs, services().engine, g.console.tenant_id, kind, before)
    return await _page("console/batches.html", kind=kind, kinds=BATCH_KINDS, runs=runs, next_before=next_before,
                       chart=chart)


def _instant_arg(name: str) -> datetime | None:
    value = request.args.get(name)
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise BadRequest(f"{name} must be an ISO 8601 instant.") from None


@blueprint.get("/batches/<batch_id>")
async def batch(batch_id: str) -> str:
    page = request.args.get("page", "1")
    shown = await blocking(pages.batch, services().engine, g.console.tenant_id, batch_id,
                           int(page) if page.isdigit() else 1)
    return await _page("console/batch.html", batch=shown, rerun=request.args.get("rerun"))


@blueprint.post("/batches/<batch_id>/rerun")
async def rerun(batch_id: str) -> Response:
    await blocking(admin_operations.rerun_batch, services().engine, services().settings, g.console.tenant_id,
                   batch_id)
    services().wake_pipeline()
    return redirect(url_for("console.batch", batch_id=batch_id, rerun="requested"), 303)


@blueprint.get("/events")
async def events() -> str:
    stores = await blocking(pages.event_stores, services().engine, g.console.tenant_id)
    return await _page("console/events.html", stores=stores)


@blueprint.get("/events/<ecom_store_id>")
async def event_store(ecom_store_id: str) -> str:
    query = {name: request.args[name] for name in ("after", "answer") if request.args.get(name)}
    shown = await blocking(pages.event_store, services().engine, g.console.tenant_id, ecom_store_id, query)
    return await _page("console/event_store.html", page=shown, replayed=request.args.get("replayed"))


async def _replay_choice() -> tuple[list[str] | None, dict[str, Any]]:
    """The dead letters a replay form names (None: all of the store's), and the admin API's body for them."""
    form = await request.form
    if form.get("all") == "yes":
        return None, {}
    chosen = form.getlist("event")
    return chosen, {"eventIds": chosen}


@blueprint.post("/events/<ecom_store_id>/replay")
async def replay_confirmation(ecom_store_id: str) -> str:
    """The confirmation step: what would be replayed; nothing changes until it is confirmed."""
    chosen, _ = await _replay_choice()
    state = await blocking(admin_operations.event_delivery, services().engine, g.console.tenant_id, ecom_store_id)
    return await _page("console/replay_confirm.html", ecom_store_id=ecom_store_id, chosen=chosen, state=state)


@blueprint.post("/events/<ecom_store_id>/replay/confirm")
async def replay(ecom_store_id: str) -> Response:
    _, body = await _replay_choice()
    report = await blocking(admin_operations.replay, services().engine, g.console.tenant_id, ecom_store_id, body)
    return redirect(url_for("console.event_store", ecom_store_id=ecom_store_id, replayed=report["replayed"]), 303)


# Orders needing attention and click-and-collect holds


def _hold() -> timedelta:
    return timedelta(hours=services().settings.click_and_collect_hold_hours)


@blueprint.get("/attention")
async def attention() -> str:
    query = validated(pages.AttentionQuery, request.args.to_dict())
    shown = await blocking(pages.attention, services().engine, g.console.tenant_id, _hold(), query)
    return await _page("console/attention.html", page=shown, retried=request.args.get("retried"),
                       retried_status=request.args.get("status"))


@blueprint.post("/attention/orders/<order_key>/retry")
async def attention_retry(order_key: str) -> Response:
    """Try to open the order now, as POST /admin/v1/tenants/{t}/orders/{order}/retry does."""
    state = await blocking(admin_operations.retry_failed_order, services().engine,
                           RetryPolicy.of(services().settings.order), g.console.tenant_id, order_key)
    return redirect(url_for("console.attention", retried=state["number"], status=state["status"]), 303)


@blueprint.get("/attention/carts/<parked_cart_id>")
async def attention_cart(parked_cart_id: str) -> str:
    shown = await blocking(pages.cart, services().engine, g.console.tenant_id, parked_cart_id, _hold())
    return await _page("console/cart.html", page=shown, ended=request.args.get("ended"))


# How a cart ends from its page, as POST /admin/v1/tenants/{t}/click_and_collect/{cart}/collect or /cancel.
_CART_ENDS = {"collect": admin_operations.collect_cart, "cancel": admin_operations.cancel_cart}


@blueprint.post("/attention/carts/<parked_cart_id>/<end>")
async def attention_cart_end(parked_cart_id: str, end: str) -> Response:
    if end not in _CART_ENDS:
        raise NotFound(f"A cart is ended by {' or '.join(_CART_ENDS)}, not {end}.")
    cart = await blocking(_CART_ENDS[end], services().engine, g.console.tenant_id, parked_cart_id, _hold())
    return redirect(url_for("console.attention_cart", parked_cart_id=parked_cart_id, ended=cart["state"]), 303)
