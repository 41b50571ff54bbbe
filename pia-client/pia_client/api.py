"""`PiaClient` (sync) and `AsyncPiaClient` (async): the demand planning API of one tenant over httpx.

Both share everything but the sending: `_Core` builds each request and reads each answer; the two subclasses
only send (with the token and the retries of `pia_client/retries.py`) and page. Tokens are fetched at the first call
and renewed shortly before they expire (`pia_client/tokens.py`).

    with PiaClient("http://127.0.0.1:8080", tenant_id, Credentials(client_id, secret)) as pia:
        limits = pia.limits()
        frame = pia.held_forecasts(retail_store_number="1001")
"""

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import httpx
import polars as pl
import pyarrow as pa
from tenacity import AsyncRetrying, RetryCallState, Retrying

from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from contracts.held_datasets import ARROW_STREAM, FORECAST_LAYOUTS, REPLENISHMENT_PARAMETERS, SALES_FORECASTS
from pia_client.frames import ACCEPT_COLUMNAR, frame, next_cursor, page_table
from pia_client.retries import RetryPolicy, failure
from pia_client.tokens import Credentials, TokenCache, token_request

SCOPE = "demand_planning"
BATCH_COLLECTIONS = {SALES_FORECAST: "sales_forecast_batches",
                     REPLENISHMENT_PARAMETER: "replenishment_parameter_batches"}
JSON = "application/json"


@dataclass(frozen=True)
class BatchAccepted:
    """The answer to an upload: `created` for 202 (new), False for 200 (the same id and body were sent before)."""

    created: bool
    status: dict[str, Any]


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    params: dict[str, str] | None = None
    accept: str = JSON
    content: bytes | None = None
    headers: dict[str, str] | None = None


def _store_query(retail_store_number: str | None, **others: str | None) -> dict[str, str]:
    query = {"retailStoreNumber": retail_store_number, **others}
    return {name: value for name, value in query.items() if value is not None}


def _instant(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError("instants need a timezone (SPEC: ISO 8601 with an offset)")
    return value.isoformat()


class _Core:
    """What the two clients share: where things are, how requests look and how answers are read."""

    def __init__(self, tenant_id: str, credentials: Credentials, retry: RetryPolicy | None,
                 tokens: TokenCache | None, on_retry: Callable[[RetryCallState], None] | None) -> None:
        self.tenant_id = tenant_id
        self._credentials = credentials
        self._tokens = tokens or TokenCache()
        self._retrying = (retry or RetryPolicy()).tenacity_arguments(on_retry)
        self._base = f"/v1/tenants/{tenant_id}/demand_planning"

    def _token_request(self) -> dict[str, Any]:
        return token_request(self.tenant_id, SCOPE, self._credentials)

    def _httpx_arguments(self, request: _Request, token: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}", "Accept": request.accept, **(request.headers or {})}
        return {"method": request.method, "url": self._base + request.path, "params": request.params,
                "content": request.content, "headers": headers}

    @staticmethod
    def _checked(response: httpx.Response) -> httpx.Response:
        if response.status_code >= 400:
            raise failure(response)
        return response

    # The requests, one per operation.

    @staticmethod
    def _put_batch(kind: str, batch_id: str, content: bytes, content_encoding: str | None) -> _Request:
        headers = {"Content-Type": JSON} | ({"Content-Encoding": content_encoding} if content_encoding else {})
        return _Request("PUT", f"/{BATCH_COLLECTIONS[kind]}/{batch_id}", content=content, headers=headers)

    @staticmethod
    def _batch_status(kind: str, batch_id: str) -> _Request:
        return _Request("GET", f"/{BATCH_COLLECTIONS[kind]}/{batch_id}")

    @staticmethod
    def _accepted(response: httpx.Response) -> BatchAccepted:
        return BatchAccepted(response.status_code == 202, response.json())

    @staticmethod
    def _forecast_query(retail_store_number: str | None, ecom_store_number: str | None,
                        page_size: int | None) -> dict[str, str]:
        return _store_query(retail_store_number, ecomStoreNumber=ecom_store_number,
                            limit=None if page_size is None else str(page_size))

    @staticmethod
    def _parameter_query(retail_store_number: str | None, modified_since: datetime | None,
                         page_size: int | None) -> dict[str, str]:
        return _store_query(retail_store_number, modifiedSince=_instant(modified_since),
                            limit=None if page_size is None else str(page_size))

    @staticmethod
    def _batch_query(received_since: datetime | None, page_size: int | None) -> dict[str, str]:
        query = {"receivedSince": _instant(received_since), "limit": None if page_size is None else str(page_size)}
        return {name: value for name, value in query.items() if value is not None}

    @staticmethod
    def _forecast_export(layout: Literal["horizon", "daily"]) -> tuple[_Request, pa.Schema]:
        return (_Request("GET", "/sales_forecasts/export", {"layout": layout}, ARROW_STREAM),
                FORECAST_LAYOUTS[layout])

    _PARAMETER_EXPORT = _Request("GET", "/replenishment_parameters/export", accept=ARROW_STREAM)


class PiaClient(_Core):
    """The demand planning API of one tenant, synchronous (scripts, notebooks, `pia upload`). `http` replaces the
    httpx client (its base_url is then the server's); `on_retry` hears of each failed attempt before the wait."""

    def __init__(self, base_url: str, tenant_id: str, credentials: Credentials, *, retry: RetryPolicy | None = None,
                 tokens: TokenCache | None = None, on_retry: Callable[[RetryCallState], None] | None = None,
                 timeout: float = 60.0, http: httpx.Client | None = None) -> None:
        super().__init__(tenant_id, credentials, retry, tokens, on_retry)
        self._http = http or httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)
        self._token_lock = threading.Lock()

    def __enter__(self) -> "PiaClient":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def access_token(self) -> str:
        with self._token_lock:
            if (token := self._tokens.current()) is None:
                requested_at = self._tokens.now()
                answer = self._checked(self._http.request(**self._token_request())).json()
                token = self._tokens.store(answer, requested_at)
            return token

    def _send(self, request: _Request) -> httpx.Response:
        # The token is read at each attempt: retries may outlast it, and a failed token request is retried too.
        for attempt in Retrying(**self._retrying):
            with attempt:
                token = self.access_token()
                return self._checked(self._http.request(**self._httpx_arguments(request, token)))
        raise AssertionError("tenacity reraises the last failure")

    def _pages(self, path: str, query: dict[str, str], accept: str) -> Iterator[httpx.Response]:
        cursor: str | None = None
        while True:
            response = self._send(_Request("GET", path, query | ({"cursor": cursor} if cursor else {}), accept))
            yield response
            if (cursor := next_cursor(response)) is None:
                return

    def limits(self) -> dict[str, int]:
        return self._send(_Request("GET", "/limits")).json()

    def retail_stores(self) -> list[dict[str, Any]]:
        return self._send(_Request("GET", "/retail_stores")).json()["items"]

    def ecom_stores(self) -> list[dict[str, Any]]:
        return self._send(_Request("GET", "/ecom_stores")).json()["items"]

    def put_batch(self, kind: str, batch_id: str, content: bytes,
                  content_encoding: str | None = "gzip") -> BatchAccepted:
        """Upload one batch body (already encoded); the same id and body again answer `created=False`."""
        return self._accepted(self._send(self._put_batch(kind, batch_id, content, content_encoding)))

    def batch_status(self, kind: str, batch_id: str) -> dict[str, Any]:
        return self._send(self._batch_status(kind, batch_id)).json()

    def iter_sales_forecasts(self, retail_store_number: str | None = None, ecom_store_number: str | None = None,
                             page_size: int | None = None) -> Iterator[dict[str, Any]]:
        query = self._forecast_query(retail_store_number, ecom_store_number, page_size)
        for page in self._pages("/sales_forecasts", query, JSON):
            yield from page.json()["items"]

    def iter_replenishment_parameters(self, retail_store_number: str | None = None,
                                      modified_since: datetime | None = None,
                                      page_size: int | None = None) -> Iterator[dict[str, Any]]:
        query = self._parameter_query(retail_store_number, modified_since, page_size)
        for page in self._pages("/replenishment_parameters", query, JSON):
            yield from page.json()["items"]

    def iter_batch_statuses(self, kind: str, received_since: datetime | None = None,
                            page_size: int | None = None) -> Iterator[dict[str, Any]]:
        """The statuses of the tenant's batches of a kind, in the order they were received."""
        for page in self._pages(f"/{BATCH_COLLECTIONS[kind]}", self._batch_query(received_since, page_size), JSON):
            yield from page.json()["items"]

    def held_forecasts(self, retail_store_number: str | None = None, ecom_store_number: str | None = None,
                       page_size: int | None = None) -> pl.DataFrame:
        query = self._forecast_query(retail_store_number, ecom_store_number, page_size)
        pages = self._pages("/sales_forecasts", query, ACCEPT_COLUMNAR)
        return frame([page_table(page, SALES_FORECASTS) for page in pages], SALES_FORECASTS)

    def replenishment_parameters(self, retail_store_number: str | None = None, modified_since: datetime | None = None,
                                 page_size: int | None = None) -> pl.DataFrame:
        query = self._parameter_query(retail_store_number, modified_since, page_size)
        pages = self._pages("/replenishment_parameters", query, ACCEPT_COLUMNAR)
        return frame([page_table(page, REPLENISHMENT_PARAMETERS) for page in pages], REPLENISHMENT_PARAMETERS)

    def export_forecasts(self, layout: Literal["horizon", "daily"] = "horizon") -> pl.DataFrame:
        request, schema = self._forecast_export(layout)
        return frame([page_table(self._send(request), schema)], schema)

    def export_parameters(self) -> pl.DataFrame:
        return frame([page_table(self._send(self._PARAMETER_EXPORT), REPLENISHMENT_PARAMETERS)],
                     REPLENISHMENT_PARAMETERS)


class AsyncPiaClient(_Core):
    """The demand planning API of one tenant, for asyncio code; the same operations as `PiaClient`."""

    def __init__(self, base_url: str, tenant_id: str, credentials: Credentials, *, retry: RetryPolicy | None = None,
                 tokens: TokenCache | None = None, on_retry: Callable[[RetryCallState], None] | None = None,
                 timeout: float = 60.0, http: httpx.AsyncClient | None = None) -> None:
        super().__init__(tenant_id, credentials, retry, tokens, on_retry)
        self._http = http or httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout)
        # Concurrent calls that find no valid token wait for one renewal instead of each fetching one.
        self._token_lock = asyncio.Lock()

    async def __aenter__(self) -> "AsyncPiaClient":
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def access_token(self) -> str:
        async with self._token_lock:
            if (token := self._tokens.current()) is None:
                requested_at = self._tokens.now()
                answer = self._checked(await self._http.request(**self._token_request())).json()
                token = self._tokens.store(answer, requested_at)
            return token

    async def _send(self, request: _Request) -> httpx.Response:
        # The token is read at each attempt: retries may outlast it, and a failed token request is retried too.
        async for attempt in AsyncRetrying(**self._retrying):
            with attempt:
                token = await self.access_token()
                return self._checked(await self._http.request(**self._httpx_arguments(request, token)))
        raise AssertionError("tenacity reraises the last failure")

    async def _pages(self, path: str, query: dict[str, str], accept: str) -> AsyncIterator[httpx.Response]:
        cursor: str | None = None
        while True:
            response = await self._send(_Request("GET", path, query | ({"cursor": cursor} if cursor else {}),
                                                 accept))
            yield response
            if (cursor := next_cursor(response)) is None:
                return

    async def limits(self) -> dict[str, int]:
        return (await self._send(_Request("GET", "/limits"))).json()

    async def retail_stores(self) -> list[dict[str, Any]]:
        return (await self._send(_Request("GET", "/retail_stores"))).json()["items"]

    async def ecom_stores(self) -> list[dict[str, Any]]:
        return (await self._send(_Request("GET", "/ecom_stores"))).json()["items"]

    async def put_batch(self, kind: str, batch_id: str, content: bytes,
                        content_encoding: str | None = "gzip") -> BatchAccepted:
        return self._accepted(await self._send(self._put_batch(kind, batch_id, content, content_encoding)))

    async def batch_status(self, kind: str, batch_id: str) -> dict[str, Any]:
        return (await self._send(self._batch_status(kind, batch_id))).json()

    async def iter_sales_forecasts(self, retail_store_number: str | None = None,
                                   ecom_store_number: str | None = None,
                                   page_size: int | None = None) -> AsyncIterator[dict[str, Any]]:
        query = self._forecast_query(retail_store_number, ecom_store_number, page_size)
        async for page in self._pages("/sales_forecasts", query, JSON):
            for item in page.json()["items"]:
                yield item

    async def iter_replenishment_parameters(self, retail_store_number: str | None = None,
                                            modified_since: datetime | None = None,
                                            page_size: int | None = None) -> AsyncIterator[dict[str, Any]]:
        query = self._parameter_query(retail_store_number, modified_since, page_size)
        async for page in self._pages("/replenishment_parameters", query, JSON):
            for item in page.json()["items"]:
                yield item

    async def iter_batch_statuses(self, kind: str, received_since: datetime | None = None,
                                  page_size: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """The statuses of the tenant's batches of a kind, in the order they were received."""
        async for page in self._pages(f"/{BATCH_COLLECTIONS[kind]}", self._batch_query(received_since, page_size),
                                      JSON):
            for status in page.json()["items"]:
                yield status

    async def held_forecasts(self, retail_store_number: str | None = None, ecom_store_number: str | None = None,
                             page_size: int | None = None) -> pl.DataFrame:
        query = self._forecast_query(retail_store_number, ecom_store_number, page_size)
        pages = self._pages("/sales_forecasts", query, ACCEPT_COLUMNAR)
        return frame([page_table(page, SALES_FORECASTS) async for page in pages], SALES_FORECASTS)

    async def replenishment_parameters(self, retail_store_number: str | None = None,
                                       modified_since: datetime | None = None,
                                       page_size: int | None = None) -> pl.DataFrame:
        query = self._parameter_query(retail_store_number, modified_since, page_size)
        pages = self._pages("/replenishment_parameters", query, ACCEPT_COLUMNAR)
        return frame([page_table(page, REPLENISHMENT_PARAMETERS) async for page in pages], REPLENISHMENT_PARAMETERS)

    async def export_forecasts(self, layout: Literal["horizon", "daily"] = "horizon") -> pl.DataFrame:
        request, schema = self._forecast_export(layout)
        return frame([page_table(await self._send(request), schema)], schema)

    async def export_parameters(self) -> pl.DataFrame:
        return frame([page_table(await self._send(self._PARAMETER_EXPORT), REPLENISHMENT_PARAMETERS)],
                     REPLENISHMENT_PARAMETERS)
