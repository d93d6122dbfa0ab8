"""``stats()`` as flat TensorBoard scalars every N steps, to any writer with ``add_scalar`` (nothing
here imports TensorBoard; Lightning: docs/guide/lightning.md)."""

from __future__ import annotations

from typing import Any, Protocol

#: the tags' common prefix: TensorBoard groups the scalars under it
PREFIX = "hybridload/"


class ScalarWriter(Protocol):
    """What `StatsWriter` writes to: TensorBoard's ``SummaryWriter`` has this method."""

    def add_scalar(self, tag: str, scalar_value: float, global_step: int | None = None) -> Any: ...


def loader_scalars(report: dict, prefix: str = PREFIX) -> dict[str, float]:
    """The figures of a ``stats()`` dict as flat scalars, each tag ``prefix`` + a name:

    ``images_per_s``, ``stall_fraction`` (``stall_s`` over ``elapsed_s``: the share of the
    time the training loop waited for data), ``stall_s``, ``retries``, ``reissued``,
    ``skipped``, and per lane ``lanes/NAME/images_per_s``, ``lanes/NAME/share`` and
    ``lanes/NAME/retries``.

    Args:
        report: ``HybridLoader.stats()`` or ``DataLoader.stats()``.
        prefix: put before every tag ("" for none).
    """
    elapsed = float(report.get("elapsed_s") or 0.0)
    stall = float(report.get("stall_s") or 0.0)
    out = {
        "images_per_s": float(report.get("images_per_s") or 0.0),
        "stall_fraction": stall / elapsed if elapsed > 0 else 0.0,
        "stall_s": stall,
        "retries": float(report.get("retries") or 0),
        "reissued": float(report.get("reissued") or 0),
        "skipped": float(report.get("skipped") or 0),
    }
    for name, lane in sorted((report.get("lanes") or {}).items()):
        for key in ("images_per_s", "share", "retries"):
            out[f"lanes/{name}/{key}"] = float(lane.get(key) or 0.0)
    return {prefix + tag: value for tag, value in out.items()}


class StatsWriter:
    """Writes the loader's `loader_scalars` to ``writer`` every ``every`` steps.

    Call ``step()`` once per training step (after the step, where the batch was used); the
    ``stats()`` dict is read and written on the first call and every ``every``-th after it, so
    the cost between writes is one counter.

    Args:
        loader: a `HybridLoader` or the drop-in `DataLoader` (anything with ``stats()``).
        writer: an object with ``add_scalar(tag, value, step)``: TensorBoard's ``SummaryWriter``
            (``torch.utils.tensorboard``, needs the ``tensorboard`` package) or one's own.
        every: steps between writes, an int >= 1.
        prefix: put before every tag (`PREFIX` by default).
    """

    def __init__(self, loader: Any, writer: ScalarWriter, every: int = 50, prefix: str = PREFIX):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"StatsWriter: every must be an int >= 1 (steps between writes), got {every!r}")
        if not callable(getattr(writer, "add_scalar", None)):
            raise TypeError(
                f"StatsWriter: writer must have add_scalar(tag, value, step), got {type(writer).__name__}; "
                "give torch.utils.tensorboard.SummaryWriter(log_dir) or an object with that method"
            )
        if not callable(getattr(loader, "stats", None)):
            raise TypeError(f"StatsWriter: loader must have stats(), got {type(loader).__name__}")
        self.loader, self.writer, self.every, self.prefix = loader, writer, every, prefix
        self._steps = 0

    def step(self, global_step: int | None = None) -> dict[str, float] | None:
        """Count one step; on a write step, write the scalars and return them (else None).

        Args:
            global_step: the step the scalars are written at (the count of ``step()`` calls when None).
        """
        at = self._steps if global_step is None else global_step
        self._steps += 1
        if (self._steps - 1) % self.every:
            return None
        figures = loader_scalars(self.loader.stats(), self.prefix)
        for tag, value in figures.items():
            self.writer.add_scalar(tag, value, at)
        return figures
