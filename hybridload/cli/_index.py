"""``hybridload index PATTERN -o manifest.json``: every shard counted and checked once, in parallel
(threads for URLs, processes for local shards), its sidecar written beside it, and a run that
stops resumed from ``OUT.partial`` (docs/guide/sources.md)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, ThreadPoolExecutor, wait
from typing import Iterable, Sequence

from hybridload.cli._args import UsageError, one_line, user_input

# hybridload.sources is imported where it is used: `hybridload --help` builds this parser without torch

log = logging.getLogger("hybridload.cli._index")

#: shards per task handed to a worker (fewer round trips for many small shards)
CHUNK = 8


def index_shards(urls: Sequence[str], image_exts: Sequence[str], sidecars: bool) -> list[tuple[str, int | str, str]]:
    """``(url, nsamples, "")`` for each shard (with why its sidecar could not be written in the
    third place, if so), or ``(url, error message, "")`` for a shard that fails."""
    from hybridload.sources._tar.shard_members import shard_members
    from hybridload.sources._tar.tar_index import index_shard, write_sidecar

    out: list[tuple[str, int | str, str]] = []
    for url in urls:
        try:
            samples, ident = index_shard(url)
            n = len(shard_members(url, samples, image_exts))
        except (OSError, ValueError) as exc:
            out.append((url, one_line(f"{type(exc).__name__}: {exc}"), ""))
            continue
        why = ""
        if sidecars:
            try:
                write_sidecar(url, ident, samples)
            except Exception as exc:  # any filesystem's error (read-only bucket, permissions): counted anyway
                why = one_line(f"{type(exc).__name__}: {exc}")
        out.append((url, n, why))
    return out


def die_with_parent(parent: int) -> None:
    """A pool worker's initializer: end when the ``index`` process that started it ends, even
    by SIGKILL (Linux's parent-death signal; elsewhere the pool's own shutdown does it)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError) as exc:  # no prctl in this libc: the pool's shutdown still ends us
            log.debug("prctl(PR_SET_PDEATHSIG) unavailable: %s", exc)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


def read_partial(path: str) -> dict[str, int]:
    """The shards a stopped run finished: ``{url: nsamples}`` (a torn last line is ignored)."""
    done: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                try:
                    entry = json.loads(line)
                    done[entry["url"]] = int(entry["nsamples"])
                except (ValueError, KeyError, TypeError):
                    continue
    except FileNotFoundError:
        pass
    return done


def _chunks(urls: Sequence[str]) -> Iterable[Sequence[str]]:
    for i in range(0, len(urls), CHUNK):
        yield urls[i : i + CHUNK]


def _run(pool: Executor, todo: Sequence[str], workers: int, image_exts, sidecars: bool, record, bar) -> tuple:
    """Index ``todo`` on ``pool``, a bounded number of tasks in flight; ``record`` each count.
    Returns the shards that failed and those whose sidecar could not be written."""
    failed: list[tuple[str, str]] = []  # (url, why it failed)
    no_sidecar: list[tuple[str, str]] = []  # (url, why its sidecar could not be written)
    pending, chunks = set(), iter(_chunks(todo))
    while True:
        for chunk in chunks:
            pending.add(pool.submit(index_shards, chunk, image_exts, sidecars))
            if len(pending) >= 4 * workers:
                break
        if not pending:
            return failed, no_sidecar
        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
        for fut in finished:
            for url, got, why in fut.result():
                if isinstance(got, int):
                    record(url, got)
                else:
                    failed.append((url, got))
                if why:
                    no_sidecar.append((url, why))
                bar.update(1)


def cmd_index(args: argparse.Namespace) -> int:
    """Write the manifest of the shards ``args.pattern`` names."""
    from tqdm import tqdm

    from hybridload.sources import expand_urls, is_url
    from hybridload.sources._tar.manifest import write_manifest
    from hybridload.sources._tar.tarshards import IMAGE_EXTS

    out = os.fspath(args.out)
    if os.path.isdir(out):  # before any work: nothing to clean up after
        raise UsageError(
            f"-o {out} is a directory: -o must be a file path, e.g. -o {os.path.join(out, 'manifest.json')}"
        )
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise UsageError(f"-o {out}: its directory does not exist")
    with user_input("PATTERN"):
        urls = expand_urls(args.pattern)
    if not urls:
        raise UsageError(f"{args.pattern!r} names no shards")
    partial = out + ".partial"
    done = read_partial(partial)
    todo = [u for u in urls if u not in done]
    remote = is_url(urls[0])
    workers = args.workers or (32 if remote else max(1, os.cpu_count() or 1))
    if done:
        log.info("resuming: %d of %d shards already in %s", len(urls) - len(todo), len(urls), partial)
    exts = tuple(e.lower().lstrip(".") for e in (args.image_exts or "").split(",") if e.strip()) or IMAGE_EXTS
    try:
        log_file = open(partial, "a")  # noqa: SIM115 - closed below, with the progress bar
    except OSError as exc:
        raise UsageError(
            f"-o {out}: cannot write {partial} there ({exc.strerror}); pick a directory you can "
            "write, e.g. -o ./manifest.json"
        ) from None
    with (
        log_file,
        tqdm(total=len(urls), initial=len(urls) - len(todo), unit="shard", desc="indexing", disable=args.quiet) as bar,
    ):

        def record(url: str, n: int) -> None:
            done[url] = n
            log_file.write(json.dumps({"url": url, "nsamples": n}) + "\n")
            log_file.flush()

        if remote or workers == 1:
            pool: Executor = ThreadPoolExecutor(max_workers=workers)
        else:
            pool = ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent, initargs=(os.getpid(),))
        with pool:
            failed, no_sidecar = _run(pool, todo, workers, exts, not args.no_sidecars, record, bar)
    if no_sidecar:
        log.warning(
            "%d sidecar index(es) could not be written (first: %s: %s); workers scan those shards "
            "when they first touch them (--no-sidecars skips writing)",
            len(no_sidecar),
            *no_sidecar[0],
        )
    if failed:
        raise UsageError(failure_line(urls, failed, len(done), partial))
    with user_input(f"-o {out}"):
        write_manifest(out, urls, [done[u] for u in urls])
    os.remove(partial)
    log.info("wrote %s: %d shards, %d samples", out, len(urls), sum(done[u] for u in urls))
    return 0


def failure_line(urls: Sequence[str], failed: list, kept: int, partial: str) -> str:
    """The one line for shards that failed (the first in the pattern's order named); logs up to
    20 of them, and removes ``partial`` where it is empty (nothing indexed, nothing to resume)."""
    place = {u: i for i, u in enumerate(urls)}
    failed.sort(key=lambda f: place[f[0]])
    for url, why in failed[:20]:
        log.error("%s: %s", url, why)
    if kept:
        keep = f"the {kept} shard{'s' if kept != 1 else ''} indexed {'are' if kept != 1 else 'is'} kept in {partial}"
    else:
        keep = "no shard was indexed"
        if os.path.exists(partial) and os.path.getsize(partial) == 0:
            os.remove(partial)
    return (
        f"{len(failed)} of {len(urls)} shard{'s' if len(urls) != 1 else ''} could not be indexed (first: "
        f"{failed[0][0]}: {failed[0][1]}); fix them and run the same command again: {keep}"
    )
