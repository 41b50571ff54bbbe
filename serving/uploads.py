"""Upload work off the event loop: worker processes, and a cap on the uploads being checked at once.

Parsing a large batch is one orjson call that holds the GIL for a quarter of a second, and checking it is more
Python work; in a thread of the API process that would stall every other request, so the work on the body runs
in child processes. They are not forked from the API process, which has threads and open connections, but from
multiprocessing's fork server: a clean process started once, which imports the upload code (Arrow, Polars) before
forking each worker, so that two workers cost one import (about 1.5 s of CPU each) instead of two, and share its pages.
They hold a lifeline to the API process: however it ends, they (and the fork server, and multiprocessing's resource
tracker) end with it.
An upload that finds every place taken waits for one for a bounded time, then gets 503 with Retry-After.
"""

import asyncio
import math
import multiprocessing
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import asynccontextmanager
from functools import partial
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from contracts.errors import ServiceUnavailable
from serving.lifeline import Lifeline, exit_with_parent

T = TypeVar("T")


def _worker_context() -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context("forkserver")
    # Imported once, in the fork server, before the first upload; not the `pia` script (its __main__), which the
    # workers do not need.
    context.set_forkserver_preload(["ingest.accept"])
    return context


def _prepare_worker(lifeline: Connection) -> None:
    exit_with_parent(lifeline)  # first: a parent that dies while this worker starts up still ends it
    # Ctrl-C in a terminal reaches the whole process group; the API process stops the workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class UploadWork:
    """processes=0 runs the work in threads of this process instead (the loop stalls; a benchmark baseline)."""

    def __init__(self, processes: int, max_concurrent: int, wait_seconds: float) -> None:
        self._processes, self._max_concurrent, self._wait_seconds = processes, max_concurrent, wait_seconds
        self._places = asyncio.Semaphore(max_concurrent)
        self._executor: Executor | None = None  # made on first use, so an app that never serves starts nothing
        self._lifeline: Lifeline | None = None  # held while worker processes may run
        self.waiting = 0  # uploads waiting for a place
        self.retry_after_seconds = max(1, math.ceil(wait_seconds))

    def _current_executor(self) -> Executor:
        if self._executor is None:
            if self._processes:
                self._lifeline = self._lifeline or Lifeline()
                self._executor = ProcessPoolExecutor(self._processes, mp_context=_worker_context(),
                                                     initializer=_prepare_worker,
                                                     initargs=(self._lifeline.child_end,))
            else:
                self._executor = ThreadPoolExecutor(self._max_concurrent, thread_name_prefix="upload")
        return self._executor

    @asynccontextmanager
    async def place(self) -> AsyncIterator[None]:
        """One of the places for an upload being checked; 503 when none frees up in time."""
        self.waiting += 1
        try:
            async with asyncio.timeout(self._wait_seconds):
                await self._places.acquire()
        except TimeoutError:
            raise ServiceUnavailable(f"Too many uploads are being checked; retry in {self.retry_after_seconds} s "
                                     "with the same batch id and body.", self.retry_after_seconds) from None
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self._places.release()

    async def compute(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """function(*args, **kwargs) in a worker, once a place is free."""
        async with self.place():
            executor = self._current_executor()
            try:
                return await asyncio.get_running_loop().run_in_executor(executor, partial(function, *args, **kwargs))
            except BrokenProcessPool:
                # A worker process died (killed, out of memory): this upload is lost, later ones get a new pool.
                if self._executor is executor:
                    self._executor = None
                    executor.shutdown(wait=False, cancel_futures=True)
                raise ServiceUnavailable("An upload worker stopped while checking this upload; nothing was stored. "
                                         "Retry with the same batch id and body.", self.retry_after_seconds) from None

    @staticmethod
    async def complete(work: Awaitable[T]) -> T:
        """Await work that goes on to its end even if the client goes away (Quart then cancels the request): a
        staged file is never left without its batch row, nor a place freed while its worker is still busy."""
        task = asyncio.ensure_future(work)
        task.add_done_callback(lambda done: done.cancelled() or done.exception())  # no "never retrieved" noise
        return await asyncio.shield(task)

    def start(self) -> None:
        """Start the worker processes now rather than at the first upload."""
        executor = self._current_executor()
        for _ in range(self._processes):
            executor.submit(int)  # a no-op; each submit while none is idle starts another process

    async def close(self) -> None:
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
            self._executor = None
        if self._lifeline is not None:
            self._lifeline.close()
            self._lifeline = None
