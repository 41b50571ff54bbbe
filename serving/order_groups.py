"""Group commit of order creation: requests that arrive while a group is being written wait, and are written
together as the next group (db/orders.py `create_orders`: one transaction, a few set-based statements per eCom
store). No timer: an order arriving at an idle server is written at once, alone; under load the groups grow to what
queued during one write, up to MAX_GROUP. Each request still gets its own answer or error."""

import asyncio

import sqlalchemy as sa

from contracts.orders import CreateOrder
from db.orders import HeldOrder, OrderRequest, create_orders
from serving.threads import blocking

# Bounds a group's transaction (and its statements' parameter lists); beyond it the rest wait for the next group.
MAX_GROUP = 64


class OrderGroups:
    """The serving process's queue of order creations, written by one group at a time on the app's event loop."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._waiting: list[tuple[OrderRequest, asyncio.Future[HeldOrder]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def create(self, tenant_id: str, ecom_store_id: str, body: CreateOrder) -> HeldOrder:
        """The stored order; raises the error the request gets (DuplicateOrder, SkuNotFound, …)."""
        answer: asyncio.Future[HeldOrder] = asyncio.get_running_loop().create_future()
        self._waiting.append((OrderRequest(tenant_id, ecom_store_id, body), answer))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_groups(), name="order-groups")
        return await answer

    async def _write_groups(self) -> None:
        try:
            while self._waiting:
                group, self._waiting = self._waiting[:MAX_GROUP], self._waiting[MAX_GROUP:]
                await self._write(group)
        finally:
            self._writer = None

    async def _write(self, group: list[tuple[OrderRequest, asyncio.Future[HeldOrder]]]) -> None:
        try:
            answers = await blocking(create_orders, self._engine, [request for request, _ in group])
        except Exception as error:  # the database failed the whole group: each request fails with it
            answers = [error] * len(group)
        for (_, future), answer in zip(group, answers, strict=True):
            if future.done():  # the request was cancelled (its client went away); its order stands
                continue
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(answer)
