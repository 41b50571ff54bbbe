"""A lean HTTP/1.1 client for the webhooks: POST a body to one URL over kept-alive connections, get the status.

Why not a general client: posting an event to a webhook is the bridge's hot path, and the general clients cost
most of its CPU. Measured on this project's machine against the benchmark's receiver (8 POSTs in flight), aiohttp
spent about 180 µs of client CPU per POST and httpx more; this exchange, on asyncio streams, about a third of that.
It does only what a webhook POST needs: a request with a Content-Length body (no redirects followed, no cookies,
no proxies, no compression), and an answer read whole, its body framed by Content-Length, chunked, or the end of
the connection, and discarded. HTTPS with the system's certificate authorities and the host name checked.

Connections are pooled per `Origin`: one per request in flight, kept for the next request unless the server said
`Connection: close` (or answered as HTTP/1.0, or without framing its body). A kept connection the server has closed
meanwhile fails before any answer: that request goes once more on a fresh connection (a duplicate at worst, which
webhook consumers deduplicate by webhook-id).
"""

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

# An answer's head larger than this is refused (asyncio's stream limit); a body larger than this is not read and
# the connection is dropped instead: a webhook's answer is a few bytes.
_LIMIT = 64 * 1024


class BadAnswer(Exception):
    """The server's answer is not HTTP/1.1 as we read it."""


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        self.writer.close()


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
        """POST `body` with these headers besides the fixed ones; raises OSError (connecting, TLS, a connection
        lost), EOFError (closed mid-answer), BadAnswer or TimeoutError (the caller's deadline)."""
        request = (self._head + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
                   + f"content-length: {len(body)}\r\n\r\n").encode("latin-1") + body
        while self._idle:
            connection = self._idle.pop()
            if connection.reader.at_eof():  # closed by the server while idle
                connection.close()
                continue
            try:
                return await self._exchange(connection, request)
            except (OSError, EOFError) as error:
                if isinstance(error, asyncio.IncompleteReadError) and error.partial:
                    raise  # the server had begun to answer: it got the request, do not send it twice here
                # A kept connection lost before any answer: most likely closed by the server meanwhile.
        reader, writer = await asyncio.open_connection(self.host, self._port, ssl=self._ssl, limit=_LIMIT)
        return await self._exchange(_Connection(reader, writer), request)

    async def _exchange(self, connection: _Connection, request: bytes) -> Answer:
        keep = False
        try:
            connection.writer.write(request)
            answer, keep = await _read_answer(connection.reader)
            return answer
        finally:
            if keep and not self._closed:
                self._idle.append(connection)
            else:
                connection.close()

    def close(self) -> None:
        """Close the idle connections; those in use close when their request ends."""
        self._closed = True
        for connection in self._idle:
            connection.close()
        self._idle.clear()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[Answer, bool]:
    """Read one answer whole (interim 1xx answers skipped); the answer and whether the connection can be kept."""
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError as error:
            raise BadAnswer("the answer's head is too large") from error
        status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise BadAnswer(f"not an HTTP/1.x status line: {status_line[:40]!r}")
        status = int(code)
        if status >= 200:
            break
    headers = {name.strip().lower(): value.strip().lower() for name, _, value in
               (line.partition(":") for line in lines)}
    keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "")
    if status in (204, 304):
        pass  # never a body
    elif "chunked" in headers.get("transfer-encoding", ""):
        await _skip_chunks(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError as error:
            raise BadAnswer("a Content-Length that is not a number") from error
        if length > _LIMIT:
            keep = False  # not worth reading: the connection goes instead
        else:
            await reader.readexactly(length)
    else:
        keep = False  # the body runs to the end of the connection: not read, the connection goes
    return Answer(status, reason), keep


async def _skip_chunks(reader: asyncio.StreamReader) -> None:
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0], 16)
        except ValueError as error:
            raise BadAnswer("a chunk size that is not a number") from error
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, up to the empty line
                pass
            return
        if size > _LIMIT:
            raise BadAnswer("a chunk too large for a webhook's answer")
        await reader.readexactly(size + 2)  # the chunk and its CRLF
