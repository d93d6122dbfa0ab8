"""PassConfig: the settings of one pass (`BatchStream`, `Dispatcher`), frozen and validated."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hybridload.execution._retry import RetryRules, StragglerRule


@dataclass(frozen=True, kw_only=True)
class PassConfig:
    """How a pass runs its tasks.

    Attributes:
        window: batches in flight or buffered ahead of the consumer; None: two per lane slot
            (`hybridload.execution._stream.default_window`).
        batch_timeout_s: how long the consumer waits for the next batch before an error naming it.
        rules: when a failed batch is retried, handed on, or raised (`hybridload.execution._retry`).
        stragglers: when a slow batch is issued again to another worker.
        gpu_memory_budget_mb: the most GPU memory (MiB) finished GPU batches may hold while they
            wait for the consumer, with the GPU lane's batches in flight; None: unbounded.
        tick_s: how often the dispatcher looks for stragglers when nothing else wakes it.
    """

    window: int | None = None
    batch_timeout_s: float = 300.0
    rules: RetryRules = field(default_factory=RetryRules)
    stragglers: StragglerRule = field(default_factory=StragglerRule)
    gpu_memory_budget_mb: float | None = None
    tick_s: float = 0.05

    def __post_init__(self):
        if self.window is not None and (not _is_int(self.window) or self.window < 1):
            raise ValueError(f"PassConfig: window must be None (two per lane slot) or an int >= 1, got {self.window!r}")
        if not _is_seconds(self.batch_timeout_s):
            raise ValueError(
                f"PassConfig: batch_timeout_s must be a positive finite number of seconds (300.0 by "
                f"default), got {self.batch_timeout_s!r}"
            )
        if not isinstance(self.rules, RetryRules):
            raise ValueError(
                f"PassConfig: rules must be a RetryRules(max_retries=..., break_after=...), got {self.rules!r}"
            )
        if not isinstance(self.stragglers, StragglerRule):
            raise ValueError(
                f"PassConfig: stragglers must be a StragglerRule(straggler_factor=..., straggler_min_s=...) "
                f"(StragglerRule(None) turns re-issuing off), got {self.stragglers!r}"
            )
        if self.gpu_memory_budget_mb is not None and not _is_seconds(self.gpu_memory_budget_mb):
            raise ValueError(
                f"PassConfig: gpu_memory_budget_mb must be None (unbounded) or a positive number of MiB, "
                f"got {self.gpu_memory_budget_mb!r}"
            )
        if not _is_seconds(self.tick_s):
            raise ValueError(
                f"PassConfig: tick_s must be a positive finite number of seconds (0.05 by default), got {self.tick_s!r}"
            )


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_seconds(v) -> bool:  # a positive finite number (seconds, or MiB)
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0
