"""``hybridload profile``: measure, solve, check a few splits for real, and report."""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from hybridload.cli._results import Profile
from hybridload.cli._tables import plural
from hybridload.planner._nvml import read_gpu
from hybridload.planner._plan import Plan
from hybridload.planner._rates import cpu_rate_per_core, gpu_lane_rate, remote_rates
from hybridload.planner._calibrate import calibrate, predict_check
from hybridload.planner._inputs import Limits, Measurements, NodeRate
from hybridload.planner._solver import plan_at, solve

log = logging.getLogger(__name__)

#: shorter measurements are start-up and a few batches: at 1 s one check measured 305 images/s
#: where the model fitted to the others predicted 126
MIN_TRUSTED_SECONDS = 2.0
#: a checked share whose measurement and the model's prediction differ by more than this fraction
DISAGREE = 0.5


def trust_warnings(seconds: float, checks: list[tuple[float, float, float]]) -> list[str]:
    """Why the profile's measurements may not be trusted: ``--seconds`` below
    `MIN_TRUSTED_SECONDS`, or checked shares ``(share, measured, predicted)`` where the
    loader and the model disagree by more than `DISAGREE` (a busy machine, too short a
    measurement)."""
    out = []
    if seconds < MIN_TRUSTED_SECONDS:
        out.append(
            f"--seconds {seconds:g} is too short to trust (each measurement is start-up and a few batches); "
            f"use --seconds {MIN_TRUSTED_SECONDS:g} or more"
        )
    bad = [(s, m, p) for s, m, p in checks if p > 0 and abs(m - p) > DISAGREE * p]
    if bad:
        out.append(
            "the loader and the model disagree: "
            + "; ".join(f"at share {s:.2f} measured {m:.0f} images/s, predicted {p:.0f}" for s, m, p in bad)
            + f"; a busy machine or too short a measurement: run again with a longer --seconds (now {seconds:g})"
        )
    return out


def _local_cpus(reserve: int) -> int:
    from hybridload._policy import usable_cpus

    return max(1, usable_cpus() - reserve)


def profile_policy(share: float, *, threads: int, gpu_threads: int):
    """The LoaderPolicy the profiler measures at GPU share ``share`` (in-process CPU lane); the
    GPU lane's rate is measured with its LaneSpec too, so both see the same engines and knobs."""
    from hybridload._policy import LoaderPolicy

    return LoaderPolicy(
        mode="cpu" if share <= 0 else "split",
        gpu_share=share if share > 0 else None,
        cpu_actors=0,
        threads=threads,
        gpu_threads=gpu_threads,
    )


def measure_loader(
    source,
    recipe,
    batch_size: int,
    share: float,
    *,
    seconds: float,
    threads: int,
    gpu_threads: int,
    device,
    seed: int = 0,
) -> float:
    """Images/s a HybridLoader really delivers at GPU share ``share`` (in-process CPU lane)."""
    from hybridload._loader import HybridLoader
    from hybridload.sampling._epochs import endless

    policy = profile_policy(share, threads=threads, gpu_threads=gpu_threads)
    with HybridLoader(source, recipe, batch_size, policy=policy, seed=seed, device=device) as ld:
        n, t0 = 0, None
        for images, _labels in endless(ld):
            if t0 is None:  # the first batch pays for start-up
                t0 = time.perf_counter()
                continue
            n += images.shape[0]
            if time.perf_counter() - t0 >= seconds:
                return n / (time.perf_counter() - t0)
    raise RuntimeError("endless() ended")  # it never does: it raises on a loader without batches


def run_profile(
    source,
    recipe,
    *,
    batch_size: int,
    seconds: float = 3.0,
    sample: int = 256,
    max_gpu_util: float = 0.9,
    reserve_local_cpus: int = 0,
    demand: float | None = None,
    gpu_threads: int = 2,
    ray_address: str | None = None,
    check_points: bool = True,
    device: torch.device | None = None,
    progress=None,
) -> Profile:
    """Measure everything, solve the plan, and (optionally) measure the loader at a few shares."""
    from hybridload.delivery._transfer import default_device

    t_start = time.perf_counter()
    device = default_device(device)
    step = progress or (lambda msg: None)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(source))[: min(sample, len(source))].tolist()
    notes = []

    step("reading the GPU through NVML")
    gpu = read_gpu(window_s=1.0, device=device)  # the GPU the loader would use, not NVML's first
    if not gpu.available:
        notes.append(f"NVML: {gpu.reason}")

    step("CPU lane on the trainer's node")
    cpus = _local_cpus(reserve_local_cpus)
    single = cpu_rate_per_core(source, recipe, idx, seconds / 2)
    # the real in-process lane on all its threads: what the cores give together (GIL, memory, the consumer)
    lane_rate = measure_loader(
        source, recipe, batch_size, 0.0, seconds=seconds, threads=cpus, gpu_threads=gpu_threads, device=device
    )
    local_rate = lane_rate / cpus
    nodes = [NodeRate("local", cpus, local_rate, True)]

    if ray_address:
        step("CPU kernels on the cluster's other nodes")
        from hybridload.raycluster import _connect as cluster

        cluster.acquire(ray_address)
        try:
            for node_id, ncpu, rate in remote_rates(source, recipe, idx, seconds):
                nodes.append(NodeRate(node_id, ncpu, rate, False))
        finally:
            cluster.release()

    step("the GPU lane")
    spec = profile_policy(1.0, threads=cpus, gpu_threads=gpu_threads).lane_spec(device=device, recipe=recipe)
    try:
        g_rate, g_cost, g_label = gpu_lane_rate(
            source, recipe, idx, seconds, batch_size=batch_size, device=device, spec=spec
        )
        # in CPU-only mode the stand-in needs no GPU time; on a GPU, NVML's reading sets the headroom
        gpu_ok = True
        util = gpu.util_mean if gpu.available and device.type == "cuda" else 0.0
    except Exception as exc:  # why is said once, in the table's GPU lane row (and the plan's notes)
        g_rate, g_cost, g_label, gpu_ok, util = 0.0, 0.0, f"none: {exc}", False, 0.0
        notes.append(f"GPU lane: {exc}")
    m = Measurements(
        nodes=tuple(nodes),
        gpu_rate=g_rate,
        gpu_util=util,
        gpu_available=gpu_ok,
        gpu_cpu_cost=g_cost,
        gpu_label=g_label,
        gpu_time_bound=device.type == "cuda",
        notes=tuple(notes),
    )
    lim = Limits(max_gpu_util=max_gpu_util, demand=demand)

    step("solving the split")
    plan = solve(m, lim)

    points = [(0.0, lane_rate)]
    if check_points and gpu_ok:

        def check(share: float) -> None:
            step(f"checking the loader at GPU share {share:.2f}")
            points.append(
                (
                    share,
                    measure_loader(
                        source,
                        recipe,
                        batch_size,
                        share,
                        seconds=seconds,
                        threads=cpus,
                        gpu_threads=gpu_threads,
                        device=device,
                    ),
                )
            )

        for s in sorted({plan.gpu_share, 1.0} - {0.0}):
            check(s)
        m = calibrate(m, points)  # the loader measured at shares 0 and 1 sets the model's rates
        plan = solve(m, lim)
        if plan.gpu_share not in {s for s, _ in points}:
            check(plan.gpu_share)
        plan = trust_measurements(plan, m, lim, points)
    extra: dict[str, object] = {
        "gpu_name": gpu.name if gpu.available else None
    }  # LoaderPolicy.from_plan compares it with the GPU here
    if check_points:
        extra["checked_points"] = points
    plan = Plan(**{**plan.to_dict(), "measurements": plan.measurements | extra})

    rows = [
        ("GPU (NVML)", _gpu_text(gpu)),
        (
            "CPU lane, trainer node",
            f"{lane_rate:.0f} images/s on {plural(cpus, 'thread')} ({single:.0f} images/s on one core alone)",
        ),
    ]
    rows += [
        (f"CPU kernels, node {n.node_id[:12]}", f"{n.per_core:.0f} images/s per core x {n.cpus} cores")
        for n in nodes[1:]
    ]
    in_loader = f" in the loader ({g_rate:.0f} run batch by batch)" if m.gpu_rate != g_rate else ""
    rows += [
        (
            "GPU lane",
            f"{m.gpu_rate:.0f} images/s{in_loader}, {m.gpu_cpu_cost:.2f} trainer cores ({g_label})"
            if gpu_ok
            else g_label,
        ),
        ("chosen GPU share", f"{plan.gpu_share:.2f}"),
        (
            "CPU workers",
            f"{plural(plan.local_threads, 'local thread')}, {plural(plan.total_actors, 'remote actor')} "
            f"{plan.cpu_actors or ''}".rstrip(),
        ),
        ("predicted images/s", " / ".join(f"{k} {v:.0f}" for k, v in plan.predicted.items())),
        ("why", plan.reason),
        ("bottleneck", plan.bottleneck),
    ]
    rows += [
        (
            f"measured at share {s:.2f}",
            f"{r:.0f} images/s (the model: {predict_check(m, lim, s):.0f}, this node's lanes alone)",
        )
        for s, r in points
    ]
    for text in trust_warnings(seconds, [(s, r, predict_check(m, lim, s)) for s, r in points]):
        log.warning("profile: %s", text)
        rows.append(("warning", text))
    return Profile(plan, m, lim, gpu, points, rows, time.perf_counter() - t_start)


def trust_measurements(
    plan: Plan, m: Measurements, lim: Limits, points: list[tuple[float, float]], margin: float = 0.03
) -> Plan:
    """Another checked share that delivered clearly more (by ``margin``) than the chosen one is
    taken, its figures from the same model (``plan_at``): two lanes of close rates make the
    model's choice flip on a noisy reading."""
    at_choice = next((r for s, r in points if s == plan.gpu_share), None)
    best_share, best_rate = max(points, key=lambda p: p[1])
    if at_choice is None or best_share == plan.gpu_share or best_rate <= at_choice * (1 + margin):
        return plan
    reason = (
        f"measured {best_rate:.0f} images/s at GPU share {best_share:.2f} against {at_choice:.0f} at the "
        f"model's choice {plan.gpu_share:.2f}: the measurement wins ({plan.reason})"
    )
    log.info("profile: %s", reason)
    return plan_at(m, lim, best_share, reason=reason, window=plan.window)


def _gpu_text(gpu) -> str:
    if not gpu.available:
        return f"none: {gpu.reason}"
    text = (
        f"{gpu.name} {gpu.uuid}: kernel-active time {gpu.util_mean:.0%} (max {gpu.util_max:.0%}) over "
        f"{gpu.window_s:g} s, {gpu.mem_free_bytes / 2**30:.1f} of {gpu.mem_total_bytes / 2**30:.1f} GiB free"
    )
    if gpu.jpeg_util is not None:
        text += f", JPEG engine {gpu.jpeg_util:.0%}"
    if gpu.nvdec_util is not None:
        text += f", NVDEC (video) {gpu.nvdec_util:.0%}"
    return text


def plot_profile(prof: Profile, path: str) -> None:
    """PNG: predicted images/s against GPU share, the measured points, the choice marked (``hybridload.cli._plots``)."""
    from hybridload.cli import _plots as plots

    plots.save(plots.profile_figure(prof), path)
