"""A lean HTTP/1.1 client for the webhooks: POST a body to one URL over kept-alive connections, get the status.

Why not a general client: posting an event to a webhook is the bridge's hot path, and the general clients cost
most of its CPU. Measured on this project's machine against the benchmark's receiver (8 POSTs in flight, signing
included), client CPU per POST: httpx about 1,000 µs, aiohttp about 180 µs, asyncio streams about 90 µs, this
protocol 55–75 µs. It does only what a webhook POST needs: a request with a Content-Length body (no redirects
followed, no cookies, no proxies, no compression), and an answer read whole, its body framed by Content-Length or
chunked and discarded (an unframed body, which runs to the end of the connection, is not read: the connection goes
instead).
HTTPS with the system's certificate authorities and the host name checked.

Connections are pooled per `Origin`: one per request in flight, kept for the next request unless the server said
`Connection: close` (or answered as HTTP/1.0, or without framing its body). A kept connection the server has closed
meanwhile fails before any answer: that request goes once more on a fresh connection (a duplicate at worst, which
webhook consumers deduplicate by webhook-id).
"""

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

# An answer's head, or a chunk of its body, larger than this is refused; a body announced larger is not read (the
# connection goes instead): a webhook's answer is a few bytes.
_LIMIT = 64 * 1024


class BadAnswer(Exception):
    """The server's answer is not HTTP/1.1 as we read it."""


class HungUp(ConnectionError):
    """The connection ended before the whole answer; `answered` says whether any of it had arrived."""

    def __init__(self, answered: bool) -> None:
        super().__init__("the server closed the connection " + ("mid-answer" if answered else "before answering"))
        self.answered = answered


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    keep_alive: bool  # the connection may carry the next request


def parse_answer(data: bytes | bytearray) -> tuple[Answer, int] | None:
    """The first whole answer in `data` (interim 1xx answers skipped) and how many bytes it took; None while it is
    incomplete. Raises BadAnswer."""
    start = 0
    while True:
        head_end = data.find(b"\r\n\r\n", start)
        if head_end < 0:
            if len(data) - start > _LIMIT:
                raise BadAnswer("the answer's head is too large")
            return None
        status_line, *lines = bytes(data[start:head_end]).decode("latin-1").split("\r\n")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise BadAnswer(f"not an HTTP/1.x status line: {status_line[:40]!r}")
        start = head_end + 4
        if int(code) >= 200:
            break
    headers = {name.strip().lower(): value.strip().lower() for name, _, value in
               (line.partition(":") for line in lines)}
    keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "")
    if int(code) in (204, 304):
        end = start  # never a body
    elif "chunked" in headers.get("transfer-encoding", ""):
        found = _chunked_end(data, start)
        if found is None:
            return None
        end = found
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError as error:
            raise BadAnswer("a Content-Length that is not a number") from error
        if length > _LIMIT:
            return Answer(int(code), reason, keep_alive=False), start  # not worth reading: the connection goes
        end = start + length
        if len(data) < end:
            return None
    else:
        return Answer(int(code), reason, keep_alive=False), start  # the body runs to the end of the connection
    return Answer(int(code), reason, keep), end


def _chunked_end(data: bytes | bytearray, at: int) -> int | None:
    """Where a chunked body starting at `at` ends (its trailers included); None while incomplete."""
    while True:
        line_end = data.find(b"\r\n", at)
        if line_end < 0:
            return None
        try:
            size = int(bytes(data[at:line_end]).split(b";", 1)[0], 16)
        except ValueError as error:
            raise BadAnswer("a chunk size that is not a number") from error
        if size > _LIMIT:
            raise BadAnswer("a chunk too large for a webhook's answer")
        if size == 0:  # the last chunk: its line's CRLF, any trailers, then an empty line
            end = data.find(b"\r\n\r\n", line_end)
            return None if end < 0 else end + 4
        at = line_end + 2 + size + 2  # the chunk and its CRLF
        if len(data) < at:
            return None


class _Connection(asyncio.Protocol):
    """One connection: a request written, its answer awaited in `waiter`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[Answer] | None = None
        self.open = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport, self.open = transport, True  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is None or self.waiter.done():
            return
        try:
            parsed = parse_answer(self.buffer)
        except BadAnswer as error:
            self.waiter.set_exception(error)
            return
        if parsed is not None:
            answer, used = parsed
            del self.buffer[:used]
            self.waiter.set_result(answer)

    def eof_received(self) -> bool:
        self._ended(HungUp(answered=bool(self.buffer)))
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended(exc or HungUp(answered=bool(self.buffer)))

    def _ended(self, error: Exception) -> None:
        self.open = False
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(error)

    async def exchange(self, request: bytes) -> Answer:
        assert self.transport is not None
        self.buffer.clear()
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        try:
            return await self.waiter
        finally:
            self.waiter = None

    def close(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()


class Origin:
    """One URL to POST to, with its pool of idle connections."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the webhook URL must be http:// or https:// with a host")
        self.host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        fixed = {"host": parts.netloc.rpartition("@")[2], **headers}
        self._head = f"POST {target} HTTP/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in fixed.items())
        self._idle: list[_Connection] = []
        self._closed = False

    async def post(self, body: bytes, headers: dict[str, str]) -> Answer:
        """POST `body` with these headers besides the fixed ones; raises OSError (connecting, TLS, the connection
        lost: HungUp), BadAnswer, or TimeoutError from the caller's deadline."""
        request = (self._head + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
                   + f"content-length: {len(body)}\r\n\r\n").encode("latin-1") + body
        while self._idle:
            connection = self._idle.pop()
            if not connection.open:  # closed by the server while idle
                continue
            try:
                return await self._exchange(connection, request)
            except HungUp as error:
                if error.answered:
                    raise  # the server had begun to answer: it got the request, do not send it twice here
            except ConnectionResetError:
                pass  # lost before any answer: most likely closed by the server meanwhile; a fresh one next
        _, connection = await asyncio.get_running_loop().create_connection(
            _Connection, self.host, self._port, ssl=self._ssl)
        return await self._exchange(connection, request)

    async def _exchange(self, connection: _Connection, request: bytes) -> Answer:
        answer = None
        try:
            answer = await connection.exchange(request)
            return answer
        finally:
            if answer is not None and answer.keep_alive and connection.open and not self._closed:
                self._idle.append(connection)
            else:  # failed, cancelled (the deadline), or not to be kept
                connection.close()

    def close(self) -> None:
        """Close the idle connections; those in use close when their request ends."""
        self._closed = True
        for connection in self._idle:
            connection.close()
        self._idle.clear()
