"""The process lane's worker side: its start, its loop, and its watch on the trainer, so a worker
whose trainer died without ``close()`` exits within ``PARENT_CHECK_S`` rather than living on with
parent 1, as torch's workers do."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import threading
import time
import traceback
from multiprocessing import shared_memory

import numpy as np
import torch

from hybridload._kernels import start_reads
from hybridload.lanes._cpu_job import process_batch

from hybridload.lanes._local.inprocess import StopAtSample

PARENT_CHECK_S = 1.0  # how often a worker looks whether the trainer still lives


def shm_view(shm: shared_memory.SharedMemory) -> memoryview:
    """``shm.buf``, which is None only once the segment is closed (the lane closes it last)."""
    buf = shm.buf
    if buf is None:
        raise RuntimeError(f"shared memory {shm.name} used after it was closed")
    return buf


def process_identity(pid: int) -> str | None:
    """``pid``'s start time, which tells it from a later process with the same pid; None when gone,
    a zombie, or unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in "ZX" else fields[19]


def exit_with_trainer(trainer: int, identity: str | None) -> None:
    """End this worker once the trainer is gone, from a thread so a worker deep in a batch notices
    too; the trainer, not the parent, since a forkserver outlives its workers."""

    def alive() -> bool:
        return process_identity(trainer) == identity if identity is not None else os.getppid() == trainer

    def watch():
        while alive():
            time.sleep(PARENT_CHECK_S)
        os._exit(0)

    threading.Thread(target=watch, name="hybridload-trainer-watch", daemon=True).start()


class SlotFlag:
    """Byte ``k`` of the lane's cancel flags, set when slot ``k``'s task belongs to a given-up pass."""

    def __init__(self, buf, k: int):
        self._buf, self._k = buf, k

    def is_set(self) -> bool:
        return self._buf[self._k] != 0


def context(start_method: str):
    """The multiprocessing context; a forkserver preloads this module, so each worker is a cheap
    fork with torch imported."""
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload([__name__])  # takes effect when the server first starts
    return ctx


def all_dead(start_method: str) -> str:
    """What `WorkerLost` says once every worker is dead: under forkserver or spawn most likely a
    missing main guard, and what to write."""
    why = "every worker of the process lane died (see the warnings above)"
    if start_method == "fork":
        return why
    return (
        f"{why}. Worker processes start by importing your main script ({start_method}): if it has no "
        '`if __name__ == "__main__":` guard around the training code, add one, or use '
        'LoaderPolicy(start_method="fork") (Linux) or LoaderPolicy(local_workers="threads")'
    )


def start_worker(ctx, name: str, args: tuple):
    """Start a worker with a task queue and results pipe of its own; the writing end is closed here,
    so only the worker holds it and the pipe ends (EOF) when it dies."""
    tasks = ctx.Queue()
    reader, writer = ctx.Pipe(duplex=False)
    try:
        proc = ctx.Process(target=worker_main, name=name, daemon=True, args=(tasks, writer, *args))
        proc.start()
    except BaseException:
        reader.close()
        tasks.close()
        raise
    finally:
        writer.close()
    return proc, tasks, reader


def stop_workers(queues, procs, join_timeout_s: float) -> None:
    """Send each worker its stop, join them (together, bounded), and terminate by handle what is left."""
    for q in queues:
        if q is not None:
            try:
                q.put(None)
            except (ValueError, OSError):
                pass
    deadline = time.monotonic() + join_timeout_s
    for p in procs:
        if p is not None:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():  # still on a batch nobody will read: stop it by handle
                stop_now(p, join_timeout_s)


def stop_now(proc, join_timeout_s: float) -> None:
    """Terminate one worker by handle (None: nothing to stop) and join it, bounded."""
    if proc is not None:
        proc.terminate()
        proc.join(join_timeout_s)


def release_channels(queues, results, segments) -> None:
    """Close the workers' task queues and result pipes, and unlink the shared-memory segments."""
    for q in queues:
        if q is not None:
            q.close()
            q.cancel_join_thread()
    for conn in results:
        if conn is not None:
            conn.close()
    for s in segments:
        s.close()
        s.unlink()


def worker_main(
    tasks,
    results,
    source,
    recipe,
    on_error: str,
    slot_names: list[str],
    trainer: tuple[int, str | None],
    flags_name: str,
) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_trainer(*trainer)
    torch.set_num_threads(1)
    slots = [shared_memory.SharedMemory(name=n) for n in slot_names]
    flags = shared_memory.SharedMemory(name=flags_name)
    try:
        while True:
            msg = tasks.get()
            if msg is None:
                return
            tid, slot, epoch, seed, indices = msg
            r = into = None
            try:
                # a batch larger than the slot (never with the recipe's shapes) travels in the
                # message
                shape = tuple(recipe.output_shape(len(indices)))
                count = int(np.prod(shape))
                if count <= slots[slot].size:
                    into = torch.frombuffer(slots[slot].buf, dtype=torch.uint8, count=count).view(shape)
                refs, reads = start_reads(source, indices)
                started = (
                    refs,
                    StopAtSample(
                        reads,
                        SlotFlag(flags.buf, slot),
                        lambda: RuntimeError(f"batch in slot {slot} cancelled: its pass was given up"),
                    ),
                )
                r = process_batch(source, recipe, indices, seed, epoch, on_error=on_error, out=into, started=started)
                payload = None if into is not None else r.images
                results.send(
                    (
                        tid,
                        "ok",
                        ((shape, "uint8"), payload, r.labels, r.indices, r.skipped, (r.seconds, r.read_seconds)),
                    )
                )
            except BaseException as exc:  # report every failure of the task to the parent
                results.send((tid, "err", picklable(exc)))
            finally:
                r = into = None  # no view of the slot outlives the task (the slot closes at exit)
    finally:
        for s in [*slots, flags]:
            try:
                s.close()
            except BufferError:  # a view still held by an error on its way to the parent: exiting anyway
                pass


def picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}\n{''.join(traceback.format_exception(exc))}")
