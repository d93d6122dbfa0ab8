"""A plan made elsewhere fitted to this machine, each change said in words for
``LoaderPolicy.from_plan`` to warn (what changes: docs/guide/planner.md, "The plan file")."""

from __future__ import annotations

from dataclasses import dataclass

from hybridload.planner._plan import Plan


@dataclass(frozen=True)
class Here:
    """This machine's facts, as far as they are known when the plan is read.

    Attributes:
        gpu_name: the GPU this process would use (torch's device name); None: no GPU.
        cpus: the CPUs this process may use.
        ray: a Ray cluster is configured (``ray_address`` or RAY_ADDRESS); without one the
            lanes run the actors' work on this machine and say so when built.
        node_ids: the live node ids of the connected Ray cluster; None: not connected yet.
        actor_slots: the actors the cluster here can hold (its CPUs less the trainer's
            reserve); None: not known yet.
    """

    gpu_name: str | None
    cpus: int
    ray: bool = False
    node_ids: frozenset[str] | None = None
    actor_slots: int | None = None


@dataclass(frozen=True)
class Fitted:
    """What of a plan runs here.

    Attributes:
        gpu_share: the GPU lane's share (0 where the plan's GPU is not here).
        cpu_actors: Ray actors to ask for; 0: none (the local lane runs ``threads``).
        threads: local threads when there are no actors.
        notes: each change, or doubt, in words (empty: the plan fits as it is).
    """

    gpu_share: float
    cpu_actors: int
    threads: int
    notes: tuple[str, ...] = ()


def fit_plan(plan: Plan, here: Here) -> Fitted:
    """The plan's split as it can run on ``here``, and what had to change, in words.

    Args:
        plan: the plan (read from a file, maybe made on another machine).
        here: this machine's facts.
    """
    notes: list[str] = []
    share, meas = plan.gpu_share, plan.measurements
    made_on = meas.get("gpu_name") or meas.get("gpu_label") or "a GPU"
    if meas.get("gpu_available") and share > 0:
        if here.gpu_name is None:
            notes.append(
                f"the plan was made with a GPU ({made_on}) but this process has none: its GPU share "
                f"{share:.2f} runs on the CPU lanes here (share 0); run `hybridload profile` on this "
                "machine for a plan of its own"
            )
            share = 0.0
        elif meas.get("gpu_name") and meas["gpu_name"] != here.gpu_name:
            notes.append(
                f"the plan was made on {made_on} but this process's GPU is {here.gpu_name}: its GPU share "
                f"{share:.2f} may not hold here; LoaderPolicy(mode='auto', plan=...) re-plans it online, or "
                "run `hybridload profile` here"
            )
    if not plan.total_actors:
        threads = max(1, plan.local_threads)
        if threads > here.cpus:
            notes.append(
                f"the plan asks for {threads} local threads but this process may use {here.cpus} CPUs; "
                f"running {here.cpus} (pass threads=... to override)"
            )
            threads = here.cpus
        return Fitted(share, 0, threads, tuple(notes))
    actors = plan.total_actors + plan.local_threads
    if here.node_ids is not None:
        unknown = sorted(set(plan.cpu_actors) - here.node_ids)
        if unknown:
            names = ", ".join(n[:12] for n in unknown[:3]) + (
                f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            )
            notes.append(
                f"the plan's node(s) {names} are not in this Ray cluster (profiled on another cluster, or "
                f"restarted: Ray gives a node a new id): its {actors} actors are asked of this cluster's nodes"
            )
    # no Ray configured: the count stands, the lanes run it here and say so
    if here.ray and here.actor_slots is not None and actors > here.actor_slots:
        notes.append(
            f"the plan asks for {actors} Ray actors but the cluster here holds {here.actor_slots}: asking "
            f"for {here.actor_slots}"
        )
        actors = here.actor_slots
    return Fitted(share, actors, 0, tuple(notes))
