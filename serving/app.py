"""The Quart application: one error body everywhere, a request id on every response."""

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable
from functools import partial

import sqlalchemy as sa
from hypercorn.middleware import ProxyFixMiddleware
from quart import Quart, Request, Response, g, request
from quart.ctx import _AppCtxGlobals as RequestGlobals  # the type of `g`, which Quart names privately
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from contracts.errors import (
    ApiError,
    BadRequest,
    InternalServerError,
    LimitExceeded,
    MethodNotAllowed,
    NotFound,
    OtherHttpError,
)
from contracts.limits import MAX_REQUEST_BYTES
from db.audit import AuditWriter
from db.ids import new_id
from db.order_processing import run_order_processor
from db.secrets import secret_box
from events import bridge
from events.relay import run_relay
from pipeline.worker import Pipeline, run_supervised
from rules.retry import RetryPolicy
from serving.application import Application
from serving.authentication import Authenticator, Caller
from serving.console import routes as console
from serving.jsonio import json_response
from serving.logs import request_context
from serving.metrics import ServerMetrics
from serving.openapi import attach_openapi
from serving.order_groups import OrderGroups
from serving.protection import finish_protected
from serving.ratelimit import RollingWindowLimiter
from serving.routes import (
    admin_api,
    click_and_collect,
    customers,
    demand_planning,
    ecom,
    loyalty_programs,
    meta,
    oauth,
    orders,
)
from serving.secret_verifier import SecretVerifier
from serving.services import Services, services
from serving.token_attempts import TokenAttemptLimits
from serving.tokens import TokenAuthority
from serving.uploads import UploadWork
from settings import Settings

log = logging.getLogger("pia.request")
# A caller's own request id is kept when it is short and safe to echo into logs and headers.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
BODY_DRAIN_SECONDS = 5.0


def create_app(settings: Settings, engine: sa.Engine, issuer: str, run_pipeline: bool = False,
               run_bridge: bool = False, run_relay: bool | None = None) -> Quart:
    """run_pipeline: also run the pipeline worker in this process; run_bridge: also deliver change events (from
    Kafka when it is set, else from the outbox); run_relay: also relay the outbox to Kafka, by default when Kafka
    is set and the DuckDB file is this process's (serving/roles.py decides for `pia serve` and `pia demo`)."""
    app = Application("pia", static_folder=None)  # a JSON API: no static files route
    # No request body may exceed the largest published limit; uploads check their own limits first.
    app.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES
    limiter = RollingWindowLimiter(settings.rate_limit.storage_url, settings.rate_limit.storage_timeout_seconds)
    secret_verifier = SecretVerifier(settings.secret_check.workers, settings.secret_check.max_pending,
                                     settings.secret_check.cache_seconds)
    app.after_serving(secret_verifier.close)
    tokens = TokenAuthority(engine, issuer, settings.token.lifetime_seconds, partial(secret_box, settings))
    audit = AuditWriter(engine)
    metrics = ServerMetrics(engine)
    app.extensions["pia"] = Services(
        settings=settings, engine=engine, tokens=tokens, limiter=limiter,
        authenticator=Authenticator(tokens, engine, settings.client_cache_seconds), audit=audit,
        secret_verifier=secret_verifier,
        token_attempts=TokenAttemptLimits(limiter, settings.token.attempts_per_minute_per_address,
                                          settings.token.attempts_per_minute_per_client),
        uploads=_attach_upload_work(app, settings), metrics=metrics, orders=OrderGroups(engine),
        wake_pipeline=_attach_pipeline_worker(app, settings, engine, metrics) if run_pipeline else lambda: None,
        wake_orders=_attach_order_processor(app, settings, engine))
    if run_bridge:
        _attach_bridge(app, settings, engine)
    if run_relay is None:
        run_relay = settings.is_embedded
    if run_relay and settings.kafka.bootstrap_servers:
        _attach_event_relay(app, settings, engine)

    @app.before_serving
    async def start_audit_writer() -> None:
        audit.start()

    @app.after_serving
    async def stop_audit_writer() -> None:
        # Every audit row of a request answered before shutdown is written before the process exits.
        await asyncio.to_thread(audit.close)

    # Each hook looks the request's proxies (`g`, `request`, `current_app`) up once: a lookup costs 1–2 µs, and
    # attribute by attribute they were some 30 a request.
    @app.before_request
    async def assign_request_id() -> None:
        state, current = g._get_current_object(), request._get_current_object()
        state.started = time.perf_counter()
        incoming, state.framed_with_body = _request_id_and_body_framing(current)
        state.request_id = incoming if incoming and _REQUEST_ID.match(incoming) else new_id()
        request_context(request_id=state.request_id)

    @app.after_request
    async def finish(response: Response) -> Response:
        state, current, pia = g._get_current_object(), request._get_current_object(), services()
        finish_protected(response, state, current, pia.audit)
        response.headers.add("X-Request-Id", state.get("request_id") or new_id())  # only ever set here
        await _drain_request_body(response, state, current)
        _account_for(response, state, current, pia.metrics)
        return response

    @app.errorhandler(ApiError)
    async def api_error(error: ApiError) -> Response:
        return json_response(error.body(), error.status, error.headers)

    @app.errorhandler(HTTPException)
    async def http_error(error: HTTPException) -> Response:
        translated = _translate(error)
        response = json_response(translated.body(), translated.status, translated.headers)
        if error.code == 405 and getattr(error, "valid_methods", None):
            response.headers["Allow"] = ", ".join(sorted(error.valid_methods))
        return response

    @app.errorhandler(Exception)
    async def unexpected(error: Exception) -> Response:
        log.exception("unhandled error in request %s %s %s", g.get("request_id"), request.method,
                      request.path)
        failure = InternalServerError(f"The server failed; quote request id {g.get('request_id')}.")
        return json_response(failure.body(), failure.status)

    for blueprint in (meta.blueprint, oauth.blueprint, ecom.blueprint, customers.blueprint,
                      click_and_collect.blueprint, loyalty_programs.blueprint, demand_planning.blueprint,
                      admin_api.blueprint, orders.blueprint, console.blueprint):
        app.register_blueprint(blueprint)
    attach_openapi(app, issuer)
    if settings.trusted_proxy_hops:
        # The client's address is the one the trusted proxies put in X-Forwarded-For, for the token-attempt
        # budgets and the logs alike (request.remote_addr); without trusted hops the header is ignored.
        app.asgi_app = ProxyFixMiddleware(app.asgi_app, mode="legacy", trusted_hops=settings.trusted_proxy_hops)
    return app


def _account_for(response: Response, state: RequestGlobals, current: Request, metrics: ServerMetrics) -> None:
    """The request's line in the log and its observation in the metrics; never its path, query or body."""
    seconds = time.perf_counter() - state.get("started", time.perf_counter())
    route = current.url_rule.rule if current.url_rule is not None else None
    level = logging.ERROR if response.status_code >= 500 else logging.INFO
    if log.isEnabledFor(level):  # the line's fields are gathered only for a log that takes it
        caller: Caller | None = state.get("caller")
        log.log(level, "request", extra={
            "request_id": state.get("request_id"), "method": current.method, "route": route,
            "status": response.status_code, "duration_ms": round(seconds * 1000, 3),
            "tenant_id": caller.client.tenant_id if caller else None,
            "client_id": caller.client.id if caller else None, "client_address": current.remote_addr})
    metrics.observe_request(route, current.method, response.status_code, seconds)


def _attach_upload_work(app: Quart, settings: Settings) -> UploadWork:
    """The worker processes that check uploads live as long as the app serves."""
    uploads = UploadWork(settings.upload_processes, settings.max_concurrent_uploads, settings.upload_wait_seconds)
    app.before_serving(uploads.start)
    app.after_serving(uploads.close)
    return uploads


def _attach_pipeline_worker(app: Quart, settings: Settings, engine: sa.Engine,
                            metrics: ServerMetrics) -> Callable[[], None]:
    """Run the pipeline in a thread while the app serves; returns how uploads wake it.

    The thread runs it supervised: a crash of the loop is logged and the loop restarted, so processing never
    ends for the life of the server (its heartbeat in /healthcheck shows whether it is alive).
    """
    pipeline = Pipeline.from_settings(settings, engine, on_attempt=metrics.batch_timings.observe)
    return _attach_thread(app, "pipeline-worker", partial(run_supervised, pipeline),
                          settings.worker.poll_seconds)


def _attach_order_processor(app: Quart, settings: Settings, engine: sa.Engine) -> Callable[[], None]:
    """Process orders in a thread while the app serves (always: the conditional RECEIVED → OPEN step lets it
    share the work with `pia worker` processes); returns how a new order wakes it."""
    return _attach_thread(app, "order-processor", partial(run_order_processor, engine, RetryPolicy.of(settings.order)),
                          settings.worker.poll_seconds)


def _attach_bridge(app: Quart, settings: Settings, engine: sa.Engine) -> None:
    """Deliver change events on the app's event loop while it serves; a delivery under way finishes on shutdown."""
    stop = asyncio.Event()
    running: list[asyncio.Task[None]] = []

    @app.before_serving
    async def start_bridge() -> None:
        running.append(asyncio.create_task(bridge.run_bridge(settings, engine, stop), name="bridge"))

    @app.after_serving
    async def stop_bridge() -> None:
        stop.set()
        await asyncio.gather(*running, return_exceptions=True)


def _attach_event_relay(app: Quart, settings: Settings, engine: sa.Engine) -> None:
    """Kafka mode: relay the outbox to Kafka here (on DuckDB this process owns the file, so it runs the one relay;
    on PostgreSQL `pia worker` processes do, or `pia demo`). It polls every relay.poll_seconds (PostgreSQL's NOTIFY
    wakes it sooner); a stop flushes its producer."""
    _attach_thread(app, "event-relay", lambda stop, _wake, _poll: run_relay(settings, engine, stop),
                   settings.relay.poll_seconds)


def _attach_thread(app: Quart, name: str, run: Callable[[threading.Event, threading.Event, float], None],
                   poll_seconds: float) -> Callable[[], None]:
    """Run `run(stop, wake, poll_seconds)` in a thread from serving start to serving end; returns how to wake it."""
    stop, wake = threading.Event(), threading.Event()
    thread = threading.Thread(target=run, args=(stop, wake, poll_seconds), name=name, daemon=True)

    @app.before_serving
    async def start_thread() -> None:
        thread.start()

    @app.after_serving
    async def stop_thread() -> None:
        stop.set()
        wake.set()
        # Work in progress (a batch, an order) finishes or rolls back before the process exits.
        await asyncio.to_thread(thread.join)

    return wake.set


async def _drain_request_body(response: Response, state: RequestGlobals, current: Request) -> None:
    """Receive the whole request body before answering, even when the route never read it.

    Hypercorn cannot keep a connection alive while part of the request is still unread; it then drops the
    connection after the response, and a client reusing it sees a disconnect. Bodies too big or too slow to
    drain get `Connection: close` instead. A request framed without a body (no Content-Length above 0, no
    Transfer-Encoding: RFC 9112 §6.3) has none to drain, and is spared the timer.
    """
    if not state.get("framed_with_body", True):
        return
    try:
        async with asyncio.timeout(BODY_DRAIN_SECONDS):  # not wait_for: on 3.11 it makes a task per request
            await current.body
    except (RequestEntityTooLarge, TimeoutError):
        response.headers["Connection"] = "close"


def _request_id_and_body_framing(current: Request) -> tuple[str | None, bool]:
    """The request's X-Request-Id (None without one) and whether it is framed with a body (a Content-Length above
    0 or a Transfer-Encoding), in one pass over its headers. Werkzeug's `headers.get` (and `content_length`) raises
    and catches an exception for a missing header, some 3 µs each; most requests lack all three."""
    request_id, framed_with_body = None, False
    for name, value in current.headers.items():
        lowercase_name = name.lower()
        if lowercase_name == "x-request-id":
            request_id = value if request_id is None else request_id
        elif lowercase_name == "transfer-encoding" or (lowercase_name == "content-length" and value != "0"):
            framed_with_body = True
    return request_id, framed_with_body


def _translate(error: HTTPException) -> ApiError:
    """Werkzeug's routing and parsing errors in the contract's shape."""
    if error.code == 404:
        return NotFound(f"No route {request.method} {request.path}.")
    if error.code == 405:
        return MethodNotAllowed(f"{request.method} is not allowed on {request.path}.")
    if error.code == 400:
        return BadRequest(error.description)
    if error.code == 413:
        return LimitExceeded("maxRequestBytes", MAX_REQUEST_BYTES, request.content_length or MAX_REQUEST_BYTES + 1)
    return OtherHttpError(error.code or 500, (error.name or "Error").upper().replace(" ", "_"),
                          error.description or "")
