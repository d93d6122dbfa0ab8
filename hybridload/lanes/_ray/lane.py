"""The Ray lane: CPU actors running the kernels, sent references only (each reads its inputs where
it runs; with ``ship_bytes`` the driver reads on reader threads, never the dispatcher's). A result
is copied once out of the object store on the lane's converter thread, never on Ray's callback
thread, which every other Ray callback of the process waits behind."""

from __future__ import annotations

import ctypes
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from hybridload.errors import SampleError
from hybridload.sources import SampleRef

from hybridload.lanes._batch_buffers import BatchBuffers, keep_for
from hybridload.lanes._ray.actor_pool import ActorPool
from hybridload.lanes._ray.callbacks import report_converted
from hybridload.lanes._ray.members import Member
from hybridload.lanes._ray.pool_config import PoolConfig
from hybridload.lanes._ray.worker import PoolWorker
from hybridload.lanes._base import BatchTask, Done

log = logging.getLogger(__name__)

_NP_TO_TORCH = {np.uint8: torch.uint8, np.float32: torch.float32, np.float16: torch.float16}
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
READER_THREADS = 4  # ship_bytes: batches whose bytes the driver reads at once
CONVERTER_THREADS = 1  # a 9 MiB copy out of the object store takes ~1.2 ms: ~800 batches/s on one thread


class Unconverted:
    """A batch's raw result as the pool's callback hands it on: converted on a converter thread."""

    def __init__(self, raw):
        self.raw = raw


def keep_freed_memory() -> bool:
    """In an actor (a process hybridload owns): let glibc keep freed large blocks, so each batch's
    buffers reuse resident pages (~3% of the kernels' CPU time); False without glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, 256 << 20) and libc.mallopt(_M_TRIM_THRESHOLD, 512 << 20))


class _Preloaded:
    """A source view over what the driver shipped, ``(payload or its SampleError, label, location)``
    per index: the actor never asks the source for a shipped sample, whose storage it may not see."""

    def __init__(self, source, payloads: dict):
        self._source, self._payloads = source, payloads

    def ref(self, index):
        got = self._payloads.get(index)
        if got is None:
            return self._source.ref(index)
        return SampleRef(int(index), got[2], int(got[1]))  # the label read (a TorchDataset knows it only then)

    def read(self, ref):
        payload, label, _ = self._payloads[ref.index]
        if isinstance(payload, SampleError):
            raise payload
        return payload, label


def ship(source, indices) -> dict:
    """The driver-side reads of ``ship_bytes``: ``{index: (payload or SampleError, label, location)}``."""
    out: dict = {}
    for i in indices:
        try:
            ref = source.ref(i)
        except SampleError as exc:
            out[i] = (exc, -1, exc.path)
            continue
        try:
            out[i] = (*source.read(ref), ref.location)
        except SampleError as exc:  # on_error is applied where the batch runs
            out[i] = (exc, ref.label, ref.location)
    return out


class KernelWorker(PoolWorker):
    """The actor: processes batch tasks with the CPU kernels, one at a time, on one CPU."""

    def __init__(self, source, recipe, on_error: str):
        super().__init__()
        if not keep_freed_memory():
            log.debug("glibc's mallopt is not available: batch buffers are allocated afresh")
        self.source, self.recipe, self.on_error = source, recipe, on_error

    def run(self, epoch: int, seed: int, indices: np.ndarray, payloads: dict | None = None):
        from hybridload.lanes._cpu_job import process_batch

        src: Any = self.source if payloads is None else _Preloaded(self.source, payloads)  # a Source or its view
        res = process_batch(
            src, self.recipe, indices, seed, epoch, on_error=self.on_error, lane="ray"
        )  # uint8 travels: 4x fewer bytes than float32
        # the actor times its reads and its decode+augment apart; both travel with the batch
        times = (res.seconds, res.read_seconds)
        return res.images.numpy(), res.labels, res.indices, res.skipped, times, (res.worker, res.node)


class RayLane(ActorPool):
    """CPU kernels on Ray actors placed by the loader's policy."""

    name = "ray"

    def __init__(
        self,
        source,
        recipe,
        pool: PoolConfig,
        *,
        on_error: str = "raise",
        ship_bytes: bool = False,
        pin_memory: bool = False,
    ):
        self.source, self.pin_memory, self.ship_bytes = source, pin_memory, ship_bytes
        self._readers = (
            ThreadPoolExecutor(READER_THREADS, thread_name_prefix="hybridload-ship") if ship_bytes else None
        )  # closed with the lane
        self._converters = ThreadPoolExecutor(CONVERTER_THREADS, thread_name_prefix="hybridload-ray-convert")
        # batches copied out of the object store into kept buffers (`batch_buffers`); pinned ones per batch
        self._buffers = BatchBuffers(0)  # before the pool starts: a failed start closes the lane
        super().__init__(KernelWorker, (source, recipe, on_error), pool)

    def call(self, actor, task: BatchTask, payloads: dict | None = None):
        if self.ship_bytes and payloads is None:  # run_batch: the caller's thread reads
            payloads = ship(self.source, task.indices.tolist())
        return actor.run.remote(task.epoch, task.seed, task.indices, payloads)  # the pass's seed, on its task

    def _send(self, m: Member, task: BatchTask, done: Done) -> None:
        if self._readers is None:
            return super()._send(m, task, done)
        try:
            self._readers.submit(self._read_and_send, m, task, done)
        except RuntimeError as exc:  # the readers are shut down: the lane closed under this task
            self._release(m, task.seq)
            done(task, exc)

    def _read_and_send(self, m: Member, task: BatchTask, done: Done) -> None:
        """On a reader thread: the batch's bytes, then the actor call; a failed read fails the batch."""
        try:
            payloads = ship(self.source, task.indices.tolist())
        except BaseException as exc:
            self._release(m, task.seq)
            done(task, exc)
            return
        if self._closed:  # closed while reading: the actors are gone, nobody waits for this batch
            return
        self._watch(m, task, done, lambda: self.call(m.handle, task, payloads))

    def _watch(self, m: Member, task: BatchTask, done: Done, call) -> None:
        """The pool's watch, its result converted on the converter thread (not Ray's callback thread)."""

        def report(t: BatchTask, out) -> None:
            if not isinstance(out, Unconverted):  # an error: nothing to copy
                done(t, out)
                return
            try:
                self._converters.submit(report_converted, self.to_batch, t, out.raw, done)
            except RuntimeError as exc:  # the converters are shut down: the lane closed under this batch
                done(t, exc)

        super()._watch(m, task, report, call)

    def run_batch(self, task: BatchTask, timeout_s: float = 300.0):
        """Run ``task`` on one actor, on this thread, and return its result (for measurements)."""
        out = super().run_batch(task, timeout_s)
        return self.to_batch(out.raw) if isinstance(out, Unconverted) else out

    def _close(self) -> None:
        if self._readers is not None:
            self._readers.shutdown(wait=False, cancel_futures=True)  # a read in progress ends on its own
        self._converters.shutdown(wait=False, cancel_futures=True)  # nobody waits for these batches
        super()._close()
        self._buffers.clear()

    def convert(self, raw):
        """On Ray's callback thread: hand the raw result on (``_watch`` converts it elsewhere)."""
        return Unconverted(raw)

    def to_batch(self, raw):
        """The raw result copied once into a (pinned, where asked) torch buffer."""
        from hybridload._batch_result import BatchResult

        images, labels, indices, skipped, (seconds, read_seconds), (worker, node) = raw
        if images.dtype == np.uint8 and not self.pin_memory:
            # the pool's slots follow its ready actors: the most it has had
            self._buffers.keep = max(self._buffers.keep, keep_for(self.slots))
            buf = self._buffers.take(images.shape)
        else:
            buf = torch.empty(images.shape, dtype=_NP_TO_TORCH[images.dtype.type], pin_memory=self.pin_memory)
        np.copyto(buf.numpy(), images)  # one copy out of the object store into a torch buffer
        out = BatchResult(buf, np.array(labels), np.array(indices), list(skipped), seconds, self.name)
        out.worker, out.node = f"ray actor {worker}", node  # the actor's process and machine, for the trace
        out.read_seconds = read_seconds
        return out
