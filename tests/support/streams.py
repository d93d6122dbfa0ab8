"""Shared test helpers: a loader's stream as comparable data, and running ranks in processes."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import socket


def batch_digest(batch) -> tuple:
    """(indices, labels, md5 of the pixels) of an (images, labels, indices) batch."""
    images, labels, indices = batch
    return (tuple(indices.tolist()), tuple(labels.tolist()), hashlib.md5(images.numpy().tobytes()).hexdigest())


def stream(loader, epochs=(0,)) -> list[tuple]:
    """[batch_digest] per batch over the given epochs (the loader needs return_indices=True)."""
    out = []
    for e in epochs:
        loader.set_epoch(e)
        out += [batch_digest(b) for b in loader]
    return out


def local_lane_streams(source, recipe, batch_size: int, *, seed: int, epochs=(0,), **policy):
    """One loader per ``local_workers`` kind ("threads", "processes"), everything else equal:
    ({kind: stream}, {kind: describe_lanes()})."""
    from hybridload import HybridLoader, LoaderPolicy

    runs, lanes = {}, {}
    for workers in ("threads", "processes"):
        with HybridLoader(
            source,
            recipe,
            batch_size,
            seed=seed,
            return_indices=True,
            device="cpu",
            policy=LoaderPolicy(local_workers=workers, **policy),
        ) as ld:
            runs[workers] = stream(ld, epochs)
            lanes[workers] = ld.describe_lanes()
    return runs, lanes


def run_rank_scripts(code: str, envs: list[dict], timeout_s: float = 600) -> list:
    """Run ``python -c code`` once per environment (one per rank), all at once; each must exit 0
    within ``timeout_s`` and print a JSON line last: those, parsed, in rank order. Kills what
    is still running on the way out."""
    import json
    import subprocess
    import sys

    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for env in envs
    ]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout_s)
            assert p.returncode == 0, err[-3000:]
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    return outs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(target, args_of_rank, world: int, timeout_s: float) -> list[int]:
    """Run ``target(*args_of_rank(rank))`` in ``world`` processes; kill any still alive after
    ``timeout_s``. Returns the exit codes. The ranks fork from the session's forkserver (a process
    of its own, never connected to Ray, that imported torch once: test_dataloader_parity asks it
    to, at collection), instead of each importing torch in an interpreter of its own."""
    ctx = mp.get_context("forkserver")
    procs = [ctx.Process(target=target, args=args_of_rank(r)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=timeout_s)
        return [p.exitcode for p in procs]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)


def two_threads_start_passes(loader, timeout_s: float = 60) -> dict:
    """Two threads each call ``iter(loader)`` at once and, once both iterators exist, read theirs to
    the end: {thread name: (pass id, "batches" and how many, or "error" and its message)}."""
    import threading

    start, made, out = threading.Barrier(2), threading.Barrier(2), {}

    def run():
        name = threading.current_thread().name
        start.wait(timeout=timeout_s)
        it = iter(loader)
        made.wait(timeout=timeout_s)  # both passes begun before either is read: they overlap
        try:
            out[name] = (it.id, "batches", sum(1 for _ in it))
        except RuntimeError as exc:
            out[name] = (it.id, "error", str(exc))

    threads = [threading.Thread(target=run, name=f"reader-{k}", daemon=True) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s)
    assert not any(t.is_alive() for t in threads), f"a reader hung past {timeout_s} s: {out}"
    return out


def check_the_newer_pass_supersedes_the_older(loader, rounds: int) -> None:
    """Over ``rounds`` of `two_threads_start_passes`: every time, the newer pass runs whole and the
    older raises that it was superseded, naming the newer pass and its thread (never both whole,
    never "next() after close()")."""
    for _ in range(rounds):
        out = two_threads_start_passes(loader)
        (old_name, old), (new_name, new) = sorted(out.items(), key=lambda kv: kv[1][0])
        assert (old[1], new[1:]) == ("error", ("batches", len(loader))), out
        assert f"was superseded by pass {new[0]} (iter(loader) on thread {new_name!r})" in old[2], out
