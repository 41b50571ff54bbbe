"""A webhook consumer for the tests: a real HTTP server on a free localhost port, on an event loop in a
thread of its own (aiohttp's server: two thirds of the CPU per POST of the standard library's threaded one, which
the tests of 200,000 deliveries felt).

It verifies every delivery the way a consumer would, with `standardwebhooks.Webhook` and the key it was given
(independently of how pia derives its key), records the deliveries that verify in arrival order, and answers 401
to those that do not. It can be told to answer with a failing status, or to be slow, for a while, or to refuse
some events only, or to hang on some events until told to behave. It counts the most POSTs it was handling at
once.
"""

import asyncio
import math
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True)
class Delivery:
    """One verified POST: the Standard Webhooks headers, the event kind and the parsed body."""

    webhook_id: str
    timestamp: int
    subject: str | None
    content_type: str | None
    body: dict[str, Any]
    connection: int  # the sender's port: one value across deliveries means one kept-alive connection


@dataclass
class _Behaviour:
    """What the receiver does until a monotonic deadline: answer `status` (None: verify and 204), after `delay`."""

    status: int | None = None
    delay: float = 0.0
    until: float = math.inf


class WebhookReceiver:
    def __init__(self, key: str | bytes) -> None:
        """`key` as a consumer hands it to `standardwebhooks.Webhook`: a `whsec_…` string, or the raw key bytes."""
        self._webhook = Webhook(key)
        self._lock = threading.Lock()
        self._deliveries: list[Delivery] = []
        self._delivered_ids: set[str] = set()  # kept as deliveries arrive: tests poll it while thousands arrive
        self._rejections: list[str] = []
        self._attempts = 0
        self._in_flight = self._most_in_flight = 0
        self._refused: dict[str, int] = {}  # webhook-id → the status its POSTs get
        self._posts_of: Counter[str] = Counter()  # webhook-id → POSTs of it that reached the receiver
        self._hanging: set[str] = set()  # webhook-ids whose POSTs get no answer until behave() (or stop())
        self._released = threading.Event()
        self._behaviour = _Behaviour()
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}/hooks"
        self._loop = asyncio.new_event_loop()
        self._serving = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> "WebhookReceiver":
        self._thread.start()
        if not self._serving.wait(10):
            raise RuntimeError("the webhook receiver did not start")
        return self

    def stop(self) -> None:
        self._released.set()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("POST", "/{path:.*}", self._handle)
        # No access log (tests inspect the deliveries instead); a handler still waiting must not hold up stop().
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.SockSite(runner, self._socket).start())
        self._serving.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(runner.cleanup())
            self._loop.close()

    async def _handle(self, request: web.Request) -> web.Response:
        try:
            body = await request.read()
        except Exception:  # the sender died mid-request (a killed bridge): nothing was delivered
            raise web.HTTPBadRequest() from None
        headers = {name.lower(): value for name, value in request.headers.items()}
        peer = request.transport.get_extra_info("peername") if request.transport else None
        return web.Response(status=await self._receive(headers, body, peer[1] if peer else 0))

    def __enter__(self) -> "WebhookReceiver":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def fail_with(self, status: int, seconds: float = math.inf) -> None:
        """Answer `status` to every POST (recording nothing) for `seconds`, or until `behave()`."""
        with self._lock:
            self._behaviour = _Behaviour(status=status, until=time.monotonic() + seconds)

    def slow_down(self, delay: float, seconds: float = math.inf) -> None:
        """Wait `delay` seconds before handling each POST, for `seconds`, or until `behave()`."""
        with self._lock:
            self._behaviour = _Behaviour(delay=delay, until=time.monotonic() + seconds)

    def refuse(self, event_ids: set[str], status: int) -> None:
        """Answer `status` to every POST of these events (recording nothing), until `behave()`."""
        with self._lock:
            self._refused = dict.fromkeys(event_ids, status)

    def hang(self, event_ids: set[str]) -> None:
        """Answer no POST of these events until `behave()` (then 503): a receiver stuck on some entity."""
        with self._lock:
            self._hanging = set(event_ids)
            self._released.clear()

    def behave(self) -> None:
        with self._lock:
            self._behaviour = _Behaviour()
            self._refused = {}
            self._hanging = set()
        self._released.set()

    @property
    def in_flight(self) -> int:
        """POSTs being handled now."""
        with self._lock:
            return self._in_flight

    @property
    def most_in_flight(self) -> int:
        """The most POSTs being handled at the same time so far."""
        with self._lock:
            return self._most_in_flight

    @property
    def deliveries(self) -> list[Delivery]:
        """The verified deliveries so far, in arrival order (duplicates included)."""
        with self._lock:
            return list(self._deliveries)

    @property
    def rejections(self) -> list[str]:
        """Why each POST that did not verify was refused."""
        with self._lock:
            return list(self._rejections)

    @property
    def attempts(self) -> int:
        """Every POST that reached the receiver, whatever it answered."""
        with self._lock:
            return self._attempts

    def posts_of(self, event_id: str) -> int:
        """POSTs of this event that reached the receiver, whatever it answered."""
        with self._lock:
            return self._posts_of[event_id]

    def event_ids(self) -> set[str]:
        with self._lock:
            return set(self._delivered_ids)

    def distinct_deliveries(self) -> int:
        """How many events arrived verified at least once: what `len(event_ids())` says, without the copy (a
        test polling a backlog of 200,000 events would spend a core copying it, and hold up the handlers)."""
        with self._lock:
            return len(self._delivered_ids)

    def _attempt(self) -> _Behaviour:
        """Count a POST and say how to treat it."""
        with self._lock:
            self._attempts += 1
            if time.monotonic() >= self._behaviour.until:
                self._behaviour = _Behaviour()
            return self._behaviour

    async def _receive(self, headers: dict[str, str], body: bytes, connection: int) -> int:
        """The status to answer a POST with, recording it if it verifies."""
        with self._lock:
            self._in_flight += 1
            self._most_in_flight = max(self._most_in_flight, self._in_flight)
        try:
            return await self._answer(headers, body, connection)
        finally:
            with self._lock:
                self._in_flight -= 1

    async def _answer(self, headers: dict[str, str], body: bytes, connection: int) -> int:
        behaviour = self._attempt()
        with self._lock:
            self._posts_of[headers.get("webhook-id", "")] += 1
        if behaviour.delay:
            await asyncio.sleep(behaviour.delay)
        if behaviour.status is not None:
            return behaviour.status
        with self._lock:
            refused = self._refused.get(headers.get("webhook-id", ""))
            hanging = headers.get("webhook-id", "") in self._hanging
        if hanging:
            while not self._released.is_set():  # set by behave() or stop(), from another thread
                await asyncio.sleep(0.02)
            return 503
        if refused is not None:
            return refused
        try:
            message = self._webhook.verify(body, headers)
        except WebhookVerificationError as error:
            with self._lock:
                self._rejections.append(str(error))
            return 401
        delivery = Delivery(webhook_id=headers["webhook-id"], timestamp=int(headers["webhook-timestamp"]),
                            subject=headers.get("webhook-subject"), content_type=headers.get("content-type"),
                            body=message, connection=connection)
        with self._lock:
            self._deliveries.append(delivery)
            self._delivered_ids.add(delivery.webhook_id)
        return 204
