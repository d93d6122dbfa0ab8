"""Building the lanes a `LaneSpec` asks for."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from hybridload.errors import close_all, take_all
from hybridload.lanes import _once as once
from hybridload.lanes._base import Lane, LaneKind
from hybridload.lanes._spec import LaneSpec

log = logging.getLogger(__name__)

#: the name (in logs and ``stats()``) of the local lane that stands in for the Ray lane
FALLBACK_NAME = "local-fallback"


@dataclass
class BuiltLanes:
    """The lanes in dispatch order and the stand-by ones among them."""

    lanes: list[Lane] = field(default_factory=list)
    fallback: list[Lane] = field(default_factory=list)


def build_lanes(
    spec: LaneSpec,
    source,
    recipe,
    *,
    batch_size: int,
    device: torch.device,
    pin_memory: bool,
) -> BuiltLanes:
    """Build the lanes ``spec`` asks for; a GPU lane that cannot run here is replaced by the
    CPU lane, with a warning."""
    for note in spec.notes:
        if once.first_time(note):
            log.warning("%s", note)
    # no batch holds more than the source's samples (torch's meaning of a large batch_size), so
    # buffers sized by the batch are not oversized
    batch_size = max(1, min(batch_size, len(source)))
    out = BuiltLanes()
    try:
        gpu = _gpu_lane(spec, source, recipe, batch_size=batch_size, device=device) if spec.gpu else None
        if gpu is not None:
            out.lanes.append(gpu)
        if gpu is not None and spec.cpu_standby:
            standby = _cpu_lane(LaneKind.CPU_LOCAL, spec, source, recipe, pin_memory=pin_memory)
            out.lanes.append(standby)
            out.fallback.append(standby)
        elif spec.cpu is LaneKind.CPU_LOCAL and spec.local_workers == "processes":
            from hybridload.lanes._local.process import ProcessLane

            out.lanes.append(
                ProcessLane(
                    source,
                    recipe,
                    workers=spec.threads,
                    batch_size=batch_size,
                    on_error=spec.options.on_error,
                    pin_memory=pin_memory,
                    start_method=spec.start_method,
                )
            )
        else:
            out.lanes.append(_cpu_lane(spec.cpu, spec, source, recipe, pin_memory=pin_memory))
            if spec.actor_fallback:  # batches the cluster has no actor for run here (threads)
                standby = _cpu_lane(
                    LaneKind.CPU_LOCAL,
                    spec,
                    source,
                    recipe,
                    pin_memory=pin_memory,
                    name=FALLBACK_NAME,
                )
                out.lanes.append(standby)
                out.fallback.append(standby)
    except BaseException:
        close_lanes(out.lanes)
        raise
    return out


def close_lanes(lanes: list) -> None:
    """Close every lane, the last built first, past failures, with one warning naming each that
    failed (clean-up paths have nobody to raise to)."""
    close_all(take_all(lanes), "closing lanes", log=log)


def _gpu_lane(spec: LaneSpec, source, recipe, *, batch_size: int, device: torch.device):
    from hybridload.lanes._gpu import make_gpu_lane

    return make_gpu_lane(spec, source, recipe, batch_size=batch_size, device=device)


def _cpu_lane(kind: LaneKind, spec: LaneSpec, source, recipe, *, pin_memory: bool, name: str | None = None) -> Lane:
    if kind is LaneKind.CPU_LOCAL:
        from hybridload.lanes._local.inprocess import InProcessLane

        lane = InProcessLane(
            source, recipe, threads=spec.threads, on_error=spec.options.on_error, pin_memory=pin_memory
        )
        if name is not None:
            lane.name = name
        return lane
    from hybridload.lanes._ray import RayLane

    o = spec.options
    return RayLane(source, recipe, o.pool, on_error=o.on_error, ship_bytes=o.ship_bytes, pin_memory=pin_memory)


def pool_reports(lanes: list, fallback: list, stats) -> dict:
    """``stats()``'s ``actor_pools`` and ``fallback`` entries (what the stand-by lanes ran, how long
    the pools had no actor); none when there is neither."""
    out: dict = {}
    pools = {lane.name: lane.stats() for lane in lanes if callable(getattr(lane, "stats", None))}
    if pools:
        out["actor_pools"] = pools
    if fallback:
        out["fallback"] = dict(
            stats.lane_totals([lane.name for lane in fallback]),
            without_actors_s=sum(p.get("without_actors_s", 0.0) for p in pools.values()),
        )
    return out
