"""Lanes: one eCom store's events waiting for delivery, a lane per entity, whatever source read them.

An entity's events (its lane, keyed by the entity id; schema events share the lane of no entity) go out in the
order they were added, one attempt at a time; different entities go out side by side, up to `workers` attempts at
once, so an entity whose event is being retried, or whose POST hangs, holds up only its own later events. A lane
whose event failed for a while waits out its own backoff; the store as a whole waits only when its destination
refuses the credentials or looks down (events/bridge.py, StoreDelivery).

Delivered events are marked in the database in bulk (every FLUSH_SECONDS, a batch's worth at once, or as soon as
no attempt is under way nor waiting), not one write per attempt: a webhook's attempt is often one event (one
entity's), and a write each would cost more than the POST. The source hears of an event only once its outcome is
written (`settled`), so a crash before that sends it again (at least once), never loses it. `held` counts the
events added and not yet settled: what the source bounds (Kafka pauses fetching, the outbox reader reads no
further).
"""

import asyncio
import contextlib
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contracts.event_message import OutgoingEvent

if TYPE_CHECKING:
    from events.bridge import StoreDelivery

log = logging.getLogger("pia.bridge")
FLUSH_SECONDS = 0.1  # how long a delivered event may wait to be marked (and its Kafka offset to be committable)


@dataclass(eq=False, slots=True)
class Held:
    """An event in its lane (`key`: its entity), with what its source settles it by (Kafka: partition and
    offset)."""

    event: OutgoingEvent
    source: Any = None
    checked_at: float = field(default_factory=time.monotonic)  # when it was last known to be still to deliver
    key: str = field(init=False)

    def __post_init__(self) -> None:
        self.key = self.event.entity_id or ""


@dataclass(slots=True)
class Lane:
    queue: deque[Held] = field(default_factory=deque)
    in_flight: int = 0  # its first events that an attempt under way carries
    ready_at: float = 0.0  # time.monotonic() before which it waits (its own backoff)
    listed: bool = False  # in the store's ready list


@dataclass(frozen=True)
class Outcome:
    """What became of an attempt's events. `gone`: settled elsewhere meanwhile (discarded with a removed
    destination), not sent; of the others, from the front: the first `delivered` were accepted (to be marked), the
    ones up to `settled` were dead-lettered or discarded (already written); the one after waits `wait` seconds
    before its lane tries again (None: it may go again at once, or after the store's wait)."""

    settled: int
    delivered: int
    wait: float | None = None
    gone: Sequence[Held] = ()


class StoreLanes:
    """One eCom store's lanes and the workers that deliver them through its StoreDelivery."""

    def __init__(self, delivery: "StoreDelivery", workers: int, settled: Callable[[Sequence[Held]], None]) -> None:
        self._delivery, self._settled = delivery, settled
        self._stop = asyncio.Event()  # close()
        self._lanes: dict[str, Lane] = {}
        self._ready: deque[str] = deque()
        self._waiting: list[tuple[float, str]] = []  # heap of lanes in backoff, by when they may go again
        # Idle workers, each waiting on a future of its own: a lane that becomes ready wakes one, not all of them.
        self._idle: deque[asyncio.Future[None]] = deque()
        self._delivered: list[Held] = []  # accepted, not yet marked
        self._attempting = 0  # attempts under way
        self._tasks = [asyncio.create_task(self._work(), name=f"bridge {delivery.store.ecom_store_id} lane worker")
                       for _ in range(workers)]
        self._tasks.append(asyncio.create_task(self._flush_now_and_then(),
                                               name=f"bridge {delivery.store.ecom_store_id} marks"))
        self.held = 0

    def add(self, held: Held) -> None:
        self.held += 1
        lane = self._lanes.get(held.key)
        if lane is None:
            lane = self._lanes[held.key] = Lane()
        lane.queue.append(held)
        self._list(held.key, lane, time.monotonic())

    def drop(self, unwanted: Callable[[Held], bool]) -> None:
        """Forget the waiting events `unwanted` picks (Kafka: a revoked partition's, which its next owner reads
        again); events in an attempt under way settle as they will."""
        for key, lane in list(self._lanes.items()):
            kept = [held for n, held in enumerate(lane.queue) if n < lane.in_flight or not unwanted(held)]
            self.held -= len(lane.queue) - len(kept)
            lane.queue = deque(kept)
            self._forget_if_idle(key, lane)

    async def close(self) -> None:
        """Stop the workers (an attempt under way ends first) and mark what was delivered."""
        self._stop.set()
        while self._idle:
            _wake(self._idle.popleft())
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._flush()

    def _list(self, key: str, lane: Lane, now: float) -> None:
        if lane.listed or lane.in_flight or not lane.queue:
            return
        lane.listed = True
        if lane.ready_at > now:
            heapq.heappush(self._waiting, (lane.ready_at, key))
        else:
            self._ready.append(key)
        while self._idle:  # one idle worker takes it (or, for a lane in backoff, times its wake-up again)
            if _wake(self._idle.popleft()):
                break

    def _forget_if_idle(self, key: str, lane: Lane) -> None:
        if not lane.queue and not lane.in_flight:
            self._lanes.pop(key, None)  # a store may see 100,000 entities: only lanes with events are kept

    def _take(self) -> list[Held]:
        """The next attempt's events: one entity's for a webhook (its POSTs go one after another, so another
        entity's would wait behind a hanging one), several entities' for a destination that sends a batch at once."""
        now = time.monotonic()
        while self._waiting and self._waiting[0][0] <= now:
            self._ready.append(heapq.heappop(self._waiting)[1])
        size, entities = self._delivery.next_batch_size(), self._delivery.entities_per_attempt()
        batch: list[Held] = []
        while self._ready and len(batch) < size and entities > 0:
            key = self._ready.popleft()
            lane = self._lanes.get(key)
            # Entries outlive what they listed (a lane dropped with a revoked partition, listed again since): only
            # a lane still listed and due is taken, once.
            if lane is None or not lane.listed or lane.ready_at > now:
                continue
            lane.listed, lane.in_flight, entities = False, min(len(lane.queue), size - len(batch)), entities - 1
            batch.extend(lane.queue[n] for n in range(lane.in_flight))
        return batch

    async def _idle_until_woken(self) -> None:
        """Wait until a lane becomes ready, the first lane in backoff may go again, or close()."""
        waiter = asyncio.get_running_loop().create_future()
        self._idle.append(waiter)
        timer = (asyncio.get_running_loop().call_later(self._waiting[0][0] - time.monotonic(), _wake, waiter)
                 if self._waiting else None)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()

    async def _work(self) -> None:
        while not self._stop.is_set():
            if self._delivery.ready_at > time.monotonic() and not await self._delivery.wait_until_ready(self._stop):
                return
            batch = self._take()
            if not batch:
                await self._idle_until_woken()
                continue
            self._attempting += 1
            try:
                outcome = await self._delivery.attempt(batch)
            except Exception:  # a bug or a lost database: logged, the events go again after a pause
                log.exception("delivery to eCom store %s failed", self._delivery.store.ecom_store_id)
                outcome = Outcome(0, 0, self._delivery.pause_after_error())
            finally:
                self._attempting -= 1
            await self._apply(batch, outcome)

    async def _apply(self, batch: list[Held], outcome: Outcome) -> None:
        now = time.monotonic()
        if outcome.gone:
            for held in outcome.gone:
                self._lanes[held.key].queue.remove(held)
            self._release(outcome.gone)
            for key in {held.key for held in batch}:
                self._lanes[key].in_flight = 0
            gone = set(outcome.gone)
            batch = [held for held in batch if held not in gone]
        for held in batch[:outcome.settled]:
            lane = self._lanes[held.key]
            if lane.queue and lane.queue[0] is held:
                lane.queue.popleft()
        if outcome.wait is not None and outcome.settled < len(batch):
            self._lanes[batch[outcome.settled].key].ready_at = now + outcome.wait
        for key in dict.fromkeys(held.key for held in batch):
            lane = self._lanes[key]
            lane.in_flight = 0
            self._list(key, lane, now)
            self._forget_if_idle(key, lane)
        self._delivered.extend(batch[:outcome.delivered])
        self._release(batch[outcome.delivered:outcome.settled])
        # Marked in bulk while other attempts go on; at once when none does and none waits (the store caught up).
        if len(self._delivered) >= self._delivery.batch_size or not (self._ready or self._attempting):
            await self._flush()

    async def _flush_now_and_then(self) -> None:
        while not self._stop.is_set():
            if await stopped_within(self._stop, FLUSH_SECONDS):
                return
            try:
                await self._flush()
            except Exception:  # the database away: kept, and marked at the next flush
                log.exception("marking events of eCom store %s delivered failed", self._delivery.store.ecom_store_id)

    async def _flush(self) -> None:
        if not self._delivered:
            return
        delivered, self._delivered = self._delivered, []
        try:
            await self._delivery.mark_delivered(delivered)
        except BaseException:
            self._delivered[:0] = delivered
            raise
        self._release(delivered)

    def _release(self, settled: Sequence[Held]) -> None:
        if settled:
            self.held -= len(settled)
            self._settled(settled)


def _wake(waiter: asyncio.Future[None]) -> bool:
    """Wake an idle worker; False when it was woken already (its timer ran out)."""
    if waiter.done():
        return False
    waiter.set_result(None)
    return True


async def stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep up to `seconds`, waking early when stopped; True when stopped."""
    if seconds > 0 and not stop.is_set():
        try:
            async with asyncio.timeout(seconds):
                await stop.wait()
        except TimeoutError:
            pass
    return stop.is_set()
