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
    """Run ``target(*args_of_rank(rank))`` in ``world`` spawned processes; kill any still alive
    after ``timeout_s``. Returns the exit codes."""
    ctx = mp.get_context("spawn")
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
