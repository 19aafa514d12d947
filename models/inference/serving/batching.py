"""Requests that arrive together are translated together: a micro-batcher on the server's event loop.

    batcher = MicroBatcher(run, replicas=2, max_batch=8, batch_timeout_s=0.01)
    await batcher.start()
    result = await batcher.submit(key, item)

Each request brings a `key` and an item. Items with equal keys can share one call (the same image size
and options); a key of None is never batched. The oldest waiting request opens a batch; it waits at most
`batch_timeout_s` for up to `max_batch` requests of its key, then `run(replica, key, items)` translates
them in a thread of its own (one per replica: a translator on each device), returning one result per
item, in order. A call that raises fails each of its requests with the exception; `run` decides what to
retry alone (a bad upload must not fail the others in its batch). Requests of other keys wait for the
next batch, in their order of arrival. How many requests the server admits at all is the app's to
bound (models/inference/serving/app.py), before it reads their uploads.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Waiting:
    key: Hashable | None
    item: Any
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)


class MicroBatcher:
    """Batches concurrent requests by key and runs them on `replicas` threads (see the module docstring)."""

    def __init__(self, run: Callable[[int, Hashable | None, list[Any]], list[Any]], replicas: int, max_batch: int,
                 batch_timeout_s: float) -> None:
        self._run = run
        self._max_batch = max_batch
        self._timeout = batch_timeout_s
        self._waiting: list[_Waiting] = []
        self._arrived: asyncio.Event | None = None
        self._free: asyncio.Queue[int] | None = None
        self._threads = ThreadPoolExecutor(max_workers=replicas, thread_name_prefix="translate")
        self._replicas = replicas
        self._task: asyncio.Task | None = None
        self._translating: set[asyncio.Task] = set()  # kept: the event loop holds its tasks only weakly
        self.batches_run = 0
        self.largest_batch = 0

    async def start(self) -> None:
        """Begin batching on the running event loop."""
        self._arrived = asyncio.Event()
        self._free = asyncio.Queue()
        for replica in range(self._replicas):
            self._free.put_nowait(replica)
        self._task = asyncio.create_task(self._batch_forever())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Stop batching; waiting requests fail with CancelledError."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for waiting in self._waiting:
            waiting.future.cancel()
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def submit(self, key: Hashable | None, item: Any) -> Any:
        """The result of translating `item` (in a batch of its `key`); raises what its batch raised."""
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(key, item, future))
        self._arrived.set()
        return await future

    async def _batch_forever(self) -> None:
        while True:
            while not self._waiting:
                self._arrived.clear()
                await self._arrived.wait()
            first = self._waiting[0]
            if first.key is not None:
                deadline = first.arrived + self._timeout
                while self._count(first.key) < self._max_batch and (left := deadline - time.monotonic()) > 0:
                    self._arrived.clear()
                    try:
                        await asyncio.wait_for(self._arrived.wait(), left)
                    except asyncio.TimeoutError:
                        break
            replica = await self._free.get()  # the batch is taken only when a replica can run it
            batch = self._take(first.key) if first.key is not None else [self._waiting.pop(0)]
            batch = [waiting for waiting in batch if not waiting.future.done()]  # clients gone meanwhile
            if not batch:
                self._free.put_nowait(replica)
                continue
            self.batches_run += 1
            self.largest_batch = max(self.largest_batch, len(batch))
            task = asyncio.create_task(self._translate(replica, first.key, batch))
            self._translating.add(task)
            task.add_done_callback(self._translating.discard)

    def _count(self, key: Hashable) -> int:
        return sum(1 for waiting in self._waiting if waiting.key == key)

    def _take(self, key: Hashable) -> list[_Waiting]:
        taken, kept = [], []
        for waiting in self._waiting:
            (taken if waiting.key == key and len(taken) < self._max_batch else kept).append(waiting)
        self._waiting = kept
        return taken

    async def _translate(self, replica: int, key: Hashable | None, batch: list[_Waiting]) -> None:
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self._threads, self._run, replica, key, [waiting.item for waiting in batch])
        except Exception as err:  # every request of the batch gets the error
            for waiting in batch:
                if not waiting.future.done():
                    waiting.future.set_exception(err)
        else:
            if len(results) != len(batch):  # a broken `run`: no request may wait for an answer forever
                results = [RuntimeError(f"{len(results)} results for a batch of {len(batch)}")] * len(batch)
            for waiting, result in zip(batch, results):
                if not waiting.future.done():
                    if isinstance(result, RuntimeError):
                        waiting.future.set_exception(result)
                    else:
                        waiting.future.set_result(result)
        finally:
            self._free.put_nowait(replica)
