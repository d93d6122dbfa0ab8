"""The split as a pure function of measurements and limits, so it is tested on recorded readings
(the model, ``T(s)``: docs/guide/planner.md, "How the split is solved")."""

from __future__ import annotations

import math
from dataclasses import asdict

from hybridload.planner._inputs import Limits as Limits
from hybridload.planner._inputs import Measurements as Measurements
from hybridload.planner._inputs import NodeRate as NodeRate
from hybridload.planner._plan import Plan

GRID = 200


def _parts(m: Measurements):
    local = next((n for n in m.nodes if n.is_trainer), None)
    local_cap = local.cpus * local.per_core if local else 0.0
    local_rate = local.per_core if local else 0.0
    remote_cap = sum(n.cpus * n.per_core for n in m.nodes if not n.is_trainer)
    return local_cap, local_rate, remote_cap


def gpu_capacity(m: Measurements, lim: Limits) -> float:
    if not m.gpu_available or m.gpu_rate <= 0:
        return 0.0
    if not m.gpu_time_bound:
        return m.gpu_rate
    headroom = max(0.0, min(1.0, lim.max_gpu_util - m.gpu_util))
    return m.gpu_rate * headroom


def bounds(m: Measurements, lim: Limits, share: float) -> dict[str, float]:
    """What caps the total at GPU share ``share``, each in images/s (``math.inf``: no cap):
    ``"demand"``, ``"gpu"`` (the GPU lane's capacity over its share) and ``"cpu"`` (the CPU
    lanes, on the local cores the GPU lane's feeding leaves them, and the remote ones).

    Args:
        m: the measurements.
        lim: the limits.
        share: the GPU lane's share of the batches, 0..1.
    """
    local_cap, local_rate, remote_cap = _parts(m)
    g_cap = gpu_capacity(m, lim)
    share = share if g_cap > 0 else 0.0
    out = {
        "demand": lim.demand if lim.demand is not None else math.inf,
        "gpu": g_cap / share if share > 0 else math.inf,
    }
    # (1-s)T <= max(0, local_cap - s*T*displaced) + remote_cap, displaced: CPU-lane images lost per GPU image
    displaced = (m.gpu_cpu_cost * local_rate / m.gpu_rate) if m.gpu_rate > 0 else 0.0
    if share >= 1:
        out["cpu"] = math.inf
    elif share * displaced <= 0:
        out["cpu"] = (local_cap + remote_cap) / (1 - share)
    else:
        shared = (local_cap + remote_cap) / ((1 - share) + share * displaced)
        # the feeding takes every local core past this: the CPU lane runs on remote cores only
        out["cpu"] = shared if shared * share * displaced <= local_cap else remote_cap / (1 - share)
    return out


def predict(m: Measurements, lim: Limits, share: float) -> dict[str, float]:
    """Predicted images/s per lane and in total (the least of `bounds`) at GPU share ``share``.

    Args:
        m: the measurements.
        lim: the limits.
        share: the GPU lane's share of the batches, 0..1.
    """
    local_cap, local_rate, remote_cap = _parts(m)
    if gpu_capacity(m, lim) <= 0:
        share = 0.0
    total = min(bounds(m, lim, share).values())
    total = 0.0 if not math.isfinite(total) else max(0.0, total)
    gpu = share * total
    cpu = total - gpu
    local_left = max(0.0, local_cap - (gpu / m.gpu_rate if m.gpu_rate > 0 else 0.0) * m.gpu_cpu_cost * local_rate)
    first, second = (
        ("local", "remote") if lim.prefer.index("local") < lim.prefer.index("remote") else ("remote", "local")
    )
    avail = {"local": local_left, "remote": remote_cap}
    take = {first: min(cpu, avail[first])}
    take[second] = max(0.0, cpu - take[first])
    return {"gpu": gpu, "cpu_local": take["local"], "cpu_remote": take["remote"], "total": total}


def sweep(m: Measurements, lim: Limits, points: int = GRID) -> list[tuple[float, float]]:
    """(share, predicted total) over an even grid of shares in [0, 1].

    Args:
        m: the measurements.
        lim: the limits.
        points: how many shares.
    """
    return [(k / points, predict(m, lim, k / points)["total"]) for k in range(points + 1)]


def solve(m: Measurements, lim: Limits = Limits(), *, window: int | None = None) -> Plan:
    """The plan for these measurements and limits (a pure function).

    Args:
        m: the measurements.
        lim: the limits.
        window: the plan's window; None: the loader's default.
    """
    curve = sweep(m, lim)
    best = max(t for _, t in curve)
    near = [s for s, t in curve if t >= best * (1 - 1e-9)]
    # among the best shares, use the expensive resources least: the last in the cost order first
    key_of = {"local": "cpu_local", "gpu": "gpu", "remote": "cpu_remote"}

    def cost(s: float) -> tuple:
        p = predict(m, lim, s)
        return tuple(round(p[key_of[r]], 6) for r in reversed(lim.prefer))

    share = min(near, key=cost)
    return plan_at(m, lim, share, window=window)


def plan_at(m: Measurements, lim: Limits, share: float, *, reason: str = "", window: int | None = None) -> Plan:
    """The plan that runs GPU share ``share``, every figure of it from one `predict`, so they agree.

    Args:
        m: the measurements.
        lim: the limits.
        share: the GPU share, 0..1.
        reason: why this share, when it was not the model's choice (default: the model's words).
        window: the plan's window; None: the loader's default.
    """
    pred = predict(m, lim, share)
    actors = workers_for(m, pred)
    local_threads = actors.pop("local", 0)
    best = max(t for _, t in sweep(m, lim))
    why, bottleneck = _explain(m, lim, share, pred, best)
    return Plan(
        gpu_share=round(share, 4),
        cpu_actors=actors,
        local_threads=local_threads,
        window=window,
        predicted={k: round(v, 2) for k, v in pred.items()},
        bottleneck=bottleneck,
        reason=reason or why,
        measurements=m.to_dict() | {"limits": asdict(lim)},
    )


def workers_for(m: Measurements, pred: dict[str, float]) -> dict[str, int]:
    """CPU workers per node that deliver the predicted CPU rates: ``"local"`` (the trainer's
    node) and remote node ids, the fastest remote cores first."""
    out: dict[str, int] = {}
    local = next((n for n in m.nodes if n.is_trainer), None)
    if local and pred["cpu_local"] > 0 and local.per_core > 0:
        out["local"] = min(local.cpus, math.ceil(pred["cpu_local"] / local.per_core - 1e-9))
    left = pred["cpu_remote"]
    for n in sorted((n for n in m.nodes if not n.is_trainer), key=lambda n: -n.per_core):
        if left <= 1e-9 or n.per_core <= 0:
            break
        k = min(n.cpus, math.ceil(left / n.per_core - 1e-9))
        out[n.node_id] = k
        left -= k * n.per_core
    return out


def _explain(m: Measurements, lim: Limits, share: float, pred: dict, best: float) -> tuple[str, str]:
    g_cap = gpu_capacity(m, lim)
    local_cap, local_rate, remote_cap = _parts(m)
    binding = [
        k
        for k, v in bounds(m, lim, share if g_cap > 0 else 0.0).items()
        if math.isfinite(v) and v <= pred["total"] * (1 + 1e-6) + 1e-9
    ]
    words = []
    if "demand" in binding:
        words.append(f"the training step (demand {lim.demand:.0f} images/s is met; loading has spare capacity)")
    if "gpu" in binding and m.gpu_time_bound:
        why = (
            f"max_gpu_util={lim.max_gpu_util:g} leaves {max(0.0, lim.max_gpu_util - m.gpu_util):.0%} of GPU time"
            if m.gpu_util > 0 or lim.max_gpu_util < 1
            else "the GPU lane's rate"
        )
        words.append(f"GPU headroom ({why}: {g_cap:.0f} images/s)")
    elif "gpu" in binding:
        words.append(f"the GPU lane's rate ({g_cap:.0f} images/s, {m.gpu_label})")
    if "cpu" in binding or not binding:
        feeding = (
            f", less the {m.gpu_cpu_cost * pred['gpu'] / m.gpu_rate:.2f} trainer cores feeding the GPU lane"
            if share > 0 and m.gpu_rate > 0 and m.gpu_cpu_cost > 0
            else ""
        )
        words.append(f"the CPUs: {local_cap:.0f} images/s local{feeding}, {remote_cap:.0f} images/s remote")
    bottleneck = " and ".join(words)
    if not m.gpu_available:
        reason = "no GPU lane: CPU lanes only"  # why not is the measurements' to say (gpu_label, notes)
    elif g_cap <= 0 and m.gpu_time_bound:
        reason = f"the training leaves no GPU time under max_gpu_util={lim.max_gpu_util:g}: CPU lanes only"
    elif share == 0:
        per_core_gpu = m.gpu_rate / m.gpu_cpu_cost if m.gpu_cpu_cost > 0 else math.inf
        reason = (
            f"the GPU lane ({m.gpu_label}) makes {per_core_gpu:.0f} images/s per trainer core it takes, "
            f"the CPU kernels {local_rate:.0f}: the trainer's cores do more on the CPU lane"
        )
    else:
        reason = (
            f"GPU share {share:.2f} maximises predicted throughput ({best:.0f} images/s): "
            f"GPU lane {pred['gpu']:.0f}, local CPUs {pred['cpu_local']:.0f}, remote CPUs {pred['cpu_remote']:.0f}"
        )
    return reason, bottleneck
