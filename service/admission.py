"""Admission control: under overload the service answers 429 or 503 quickly instead of piling up work.

At most `slots` requests of one class (searches, writes) run at once (their work runs in worker threads); up to `queue`
more wait for a slot for at most `timeout` seconds and then get 503; a request that finds the queue
full gets 429 at once. Both carry Retry-After. The check happens on the event loop, before a worker
thread is taken, so a flood of requests cannot exhaust the thread pool that health checks and other
routes also need.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from starlette.concurrency import run_in_threadpool

from service.errors import Overloaded, Unavailable

T = TypeVar("T")


class Limiter:
    def __init__(
        self, name: str, slots: int, queue: int, timeout: float, on_reject: Callable[[str, int], None] | None = None
    ) -> None:
        self.name = name
        self.slots = slots
        self.queue = queue
        self.timeout = timeout
        self._on_reject = on_reject
        self._semaphore: asyncio.Semaphore | None = None
        self.running = 0
        self.waiting = 0

    def _reject(self, error: Overloaded | Unavailable) -> Overloaded | Unavailable:
        if self._on_reject is not None:
            self._on_reject(self.name, error.status_code)
        return error

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the `slots` for the body of an `async with` (the router's fan-outs run on the loop)."""
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.slots)
        semaphore = self._semaphore
        if semaphore.locked():
            if self.waiting >= self.queue:
                raise self._reject(
                    Overloaded(
                        f"server busy: {self.running} {self.name} requests running and "
                        f"{self.waiting} waiting; retry later",
                        headers={"Retry-After": "1"},
                    )
                )
            self.waiting += 1
            try:
                async with asyncio.timeout(self.timeout):
                    await semaphore.acquire()
            except TimeoutError:
                raise self._reject(
                    Unavailable(
                        f"no capacity for this {self.name} request within {self.timeout:g}s; retry later",
                        headers={"Retry-After": "2"},
                    )
                ) from None
            finally:
                self.waiting -= 1
        else:
            await semaphore.acquire()
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            semaphore.release()

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run `fn(*args)` in a worker thread once a slot is free."""
        async with self.slot():
            return await run_in_threadpool(fn, *args)
