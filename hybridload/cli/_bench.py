"""``hybridload bench``: what scale-up and scale-out buy, each mode's images/s, shares, consumer
wait and peak memory measured in one command, labelled with what really ran (the modes:
docs/guide/bench.md)."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import asdict
from typing import TYPE_CHECKING
from hybridload import _environment as environment

if TYPE_CHECKING:  # imported where used: `hybridload --help` builds its parser without torch
    from hybridload.cli._results import ModeResult

log = logging.getLogger(__name__)

MODES = ("single-gpu", "multi-node", "cpu")
POLICY_MODES = ("auto", "gpu", "split")  # LoaderPolicy's names (its "cpu" is the bench's "cpu")


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _family(root: int) -> set[int]:
    pids, changed = {root}, True
    parents = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    parents[int(p)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in pids and pid not in pids:
                pids.add(pid)
                changed = True
    return pids


class RssSampler:
    """Peak resident memory of this process and its descendants, sampled every ``interval_s``."""

    def __init__(self, interval_s: float = 0.25):
        self.interval_s = interval_s
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hybridload-rss", daemon=True)

    def _run(self):
        while not self._stop.is_set():
            total = sum(_rss_kb(p) for p in _family(os.getpid()))
            self.peak_kb = max(self.peak_kb, total)
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


def policy_for(mode: str, plan, *, ray_address: str | None, threads: int | None):
    """The LoaderPolicy a bench mode runs; its lanes (the GPU share included: the plan's, else
    ``_policy.decode.START_SHARE``) are decoded by the loader, as for any policy (``_policy.lane_spec``)."""
    from hybridload._policy.decode import START_SHARE
    from hybridload._policy import LoaderPolicy

    fixed = {
        "gpu": dict(mode="gpu"),  # the policy's own mode names, on this node's lanes
        "split": dict(mode="split", plan=plan, gpu_share=START_SHARE if plan is None else None),
    }
    if mode in fixed:
        return LoaderPolicy(**fixed[mode], cpu_actors=0, threads=threads)
    if mode in ("single-gpu", "auto"):
        return LoaderPolicy(mode="auto", plan=plan, cpu_actors=0, threads=threads)
    if mode == "multi-node":
        return LoaderPolicy(
            mode="auto",
            plan=plan,
            cpu_actors=None,
            ray_address=ray_address or environment.text("RAY_ADDRESS") or "embedded",
            placement="any",
            reserve_local_cpus=0,
        )
    if mode == "cpu":
        if ray_address:
            return LoaderPolicy(
                mode="cpu", cpu_actors=None, ray_address=ray_address, placement="any", reserve_local_cpus=0
            )
        return LoaderPolicy(mode="cpu", cpu_actors=0, threads=threads)
    raise ValueError(f"unknown bench mode {mode!r}; choose from {', '.join(MODES + POLICY_MODES)}")


def run_mode(
    source,
    recipe,
    mode: str,
    *,
    batch_size: int,
    batches: int,
    step_ms: float,
    plan=None,
    ray_address: str | None = None,
    threads: int | None = None,
    progress=None,
) -> ModeResult:
    """Run ``batches`` batches in ``mode`` with a consumer that takes ``step_ms`` per step."""
    import torch

    from hybridload.cli._results import ModeResult
    from hybridload._loader import HybridLoader
    from hybridload.sampling._epochs import endless

    policy = policy_for(mode, plan, ray_address=ray_address, threads=threads)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with RssSampler() as rss, HybridLoader(source, recipe, batch_size, policy=policy, seed=0) as ld:
        it = endless(ld)
        next(it)  # start-up (actors, pipelines) is not part of the rate
        ld.reset_stats()
        n_img = n_batch = 0
        t0 = time.perf_counter()
        while n_batch < batches:
            images, _labels = next(it)
            n_img += images.shape[0]
            n_batch += 1
            if step_ms > 0:
                time.sleep(step_ms / 1000.0)  # the training step
            if progress:
                progress(1)
        wall = time.perf_counter() - t0
        st = ld.stats()
        label = ld.describe_lanes(used_only=True)  # only the lanes that took batches in the timed part
    return ModeResult(
        mode=mode,
        label=label,
        images_per_s=n_img / wall,
        batches=n_batch,
        images=n_img,
        shares={k: round(v["share"], 3) for k, v in st["lanes"].items()},
        wait_fraction=min(1.0, st["stall_s"] / wall),
        step_ms=step_ms,
        peak_rss_mb=rss.peak_kb / 1024,
        peak_gpu_mb=(torch.cuda.max_memory_allocated() / 2**20) if cuda else None,
        seconds=wall,
        retries=st["retries"],
    )


def plot_results(results: list[ModeResult], path: str) -> None:
    """PNG: images/s per mode, with what ran in each (``hybridload.cli._plots``)."""
    from hybridload.cli import _plots as plots

    plots.save(plots.bench_figure(results), path)


def as_json(results: list[ModeResult], meta: dict) -> dict:
    return {"meta": meta, "modes": [asdict(r) for r in results]}
