"""A memory filesystem that behaves like object storage: a fixed latency per request, and
counters of the requests it served (how many, how many at once at most, bytes).

``slowmem://`` shares its files with fsspec's ``memory://`` (one store per process): write
with ``memory://``, read through ``slowmem://`` with ``storage_options={"latency_s": 0.02}``.
Each ``cat_file`` (whole or ranged) and each ``open`` counts as one request and sleeps
``latency_s`` first, as a round trip to S3 or GCS would. For the tests of the
ingest path; importing this module registers the protocol with fsspec.

    SlowMemoryFileSystem.reset_counts(); ...; SlowMemoryFileSystem.counts()["max_in_flight"]

The counters are the process's, shared by every instance (fsspec makes one instance per
thread), and the latency an instance's (``latency_s``, part of its storage options).
"""

from __future__ import annotations

import threading
import time

import fsspec
from fsspec.implementations.memory import MemoryFileSystem

PROTOCOL = "slowmem"


class SlowMemoryFileSystem(MemoryFileSystem):
    """``memory://`` with ``latency_s`` seconds per request and request counters."""

    protocol = PROTOCOL
    _count_lock = threading.Lock()
    _requests = _in_flight = _max_in_flight = _bytes = 0

    def __init__(self, latency_s: float = 0.0, **kwargs):
        if not isinstance(latency_s, (int, float)) or latency_s < 0:
            raise ValueError(f"SlowMemoryFileSystem: latency_s must be a number >= 0, got {latency_s!r}")
        super().__init__(**kwargs)
        self.latency_s = float(latency_s)

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith(f"{PROTOCOL}://"):
            path = "memory://" + path[len(PROTOCOL) + 3 :]
        return super()._strip_protocol(path)

    @classmethod
    def reset_counts(cls) -> None:
        """Zero every counter (after building a source, to count only its sample reads)."""
        with cls._count_lock:
            cls._requests = cls._max_in_flight = cls._bytes = 0

    @classmethod
    def counts(cls) -> dict:
        """``requests``, ``max_in_flight`` (the most served at once), ``bytes`` returned."""
        with cls._count_lock:
            return {"requests": cls._requests, "max_in_flight": cls._max_in_flight, "bytes": cls._bytes}

    def _request(self, fn, *args, **kwargs):
        cls = type(self)
        with cls._count_lock:
            cls._requests += 1
            cls._in_flight += 1
            cls._max_in_flight = max(cls._max_in_flight, cls._in_flight)
        try:
            if self.latency_s:
                time.sleep(self.latency_s)
            out = fn(*args, **kwargs)
        finally:
            with cls._count_lock:
                cls._in_flight -= 1
        if isinstance(out, (bytes, bytearray)):
            with cls._count_lock:
                cls._bytes += len(out)
        return out

    def cat_file(self, path, start=None, end=None, **kwargs):
        return self._request(super().cat_file, path, start=start, end=end, **kwargs)

    def _open(self, path, mode="rb", **kwargs):
        return self._request(super()._open, path, mode=mode, **kwargs)


fsspec.register_implementation(PROTOCOL, SlowMemoryFileSystem, clobber=True)
