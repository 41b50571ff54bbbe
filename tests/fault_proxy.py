"""A deliberate fault injector in front of a real pia server, for the client's and the uploader's tests.

It forwards every request to the real server over HTTP, except that, at random (seeded), it answers 429 with
`Retry-After` or 503 itself: half of the faults before forwarding (the server never saw the request), half after
(the server did the work, and its answer is lost, as when a connection drops on the way back). It can also delay
every request, so a run takes long enough to be killed in the middle. It counts what reached the server.
"""

import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


class FaultProxy:
    def __init__(self, upstream: str, fault_rate: float = 0.0, delay: float = 0.0, seed: int = 10) -> None:
        self.upstream, self.fault_rate, self.delay = upstream, fault_rate, delay
        self.forwarded: Counter[str] = Counter()  # "METHOD path" → requests that reached the server
        self.faults: Counter[int] = Counter()  # status → faults answered
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._http = httpx.Client(base_url=upstream, timeout=60)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._http.close()

    @property
    def requests(self) -> int:
        return sum(self.forwarded.values())

    def _fault(self) -> tuple[int, bool] | None:
        """(status, after forwarding) for a request to fail, or None."""
        with self._lock:
            if self._random.random() >= self.fault_rate:
                return None
            return self._random.choice((429, 503)), self._random.random() < 0.5

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _fail(self, status: int) -> None:
                with proxy._lock:
                    proxy.faults[status] += 1
                headers = [("Content-Type", "application/json")] + ([("Retry-After", "1")] if status == 429 else [])
                self._answer(status, headers, b'{"error":"INJECTED_FAULT","message":"fault proxy"}')

            def _forward(self) -> None:
                time.sleep(proxy.delay)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fault = proxy._fault()
                if fault and not fault[1]:
                    return self._fail(fault[0])
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                response = proxy._http.request(self.command, self.path, content=body, headers=headers)
                with proxy._lock:
                    proxy.forwarded[f"{self.command} {self.path.split('?')[0]}"] += 1
                if fault:
                    return self._fail(fault[0])
                self._answer(response.status_code, [(k, v) for k, v in response.headers.items()
                                                    if k.lower() not in HOP_BY_HOP], response.content)

            do_GET = do_PUT = do_POST = _forward

        return Handler
