"""Whole shards a worker keeps for shard streaming: an LRU of the reads' futures, so threads
asking for a shard being fetched share one read; a failed fetch is not kept, and an evicted
shard lives on through the batches still using it."""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Future
from typing import Callable

from hybridload.sources._reads import io_pool


class ShardCache:
    """``get(url)`` → a future of the shard's bytes, read by ``fetch(url)`` at most once while cached."""

    def __init__(self, fetch: Callable[[str], bytes], capacity: int):
        if capacity < 1:
            raise ValueError(f"ShardCache: capacity must be >= 1 shard, got {capacity}")
        self._fetch, self.capacity = fetch, capacity
        self._lock = threading.Lock()
        self._futures: OrderedDict[str, Future] = OrderedDict()
        self.fetches = 0  # whole-shard reads started by this cache
        _caches.add(self)

    def _forget(self) -> None:
        """In a forked child: a fresh lock (a parent thread may have held this one at the fork)
        and nothing cached (a fetch in flight in the parent never completes here)."""
        self._lock = threading.Lock()
        self._futures = OrderedDict()

    def get(self, url: str) -> Future:
        with self._lock:
            fut = self._futures.get(url)
            if fut is not None and not (fut.done() and fut.exception() is not None):
                self._futures.move_to_end(url)
                return fut
            fut = io_pool().submit(self._fetch, url)  # new, or again after a failed fetch
            self.fetches += 1
            self._futures[url] = fut
            self._futures.move_to_end(url)
            while len(self._futures) > self.capacity:
                self._futures.popitem(last=False)
        return fut

    def cached(self) -> list[str]:
        """The shards held (or being fetched), least recently used first."""
        with self._lock:
            return list(self._futures)


_caches: "weakref.WeakSet[ShardCache]" = weakref.WeakSet()


def _forget_all() -> None:
    for cache in list(_caches):
        cache._forget()


os.register_at_fork(after_in_child=_forget_all)
