"""Plan: the planner's decision as data, stored as a versioned JSON file (never pickled)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from hybridload.errors import HybridLoadError

FORMAT_VERSION = 1


class PlanFormatError(HybridLoadError, ValueError):
    """A plan file that cannot be used: the message says what is wrong and what to do (a
    ``ValueError`` too, for ``except ValueError`` around reading a plan)."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    """How a loader splits its work.

    Attributes:
        gpu_share: fraction of batches the GPU lane takes (a cap), 0..1.
        cpu_actors: Ray CPU actors per node id ("local" for the trainer's node).
        local_threads: in-process threads when no Ray actors are planned (0 = none).
        window: batches in flight ahead of the consumer.
        predicted: predicted images/s per lane ("gpu", "cpu_local", "cpu_remote") and "total".
        bottleneck: what limits the predicted throughput, in words.
        reason: why this split, in words.
        measurements: the readings the plan was solved from (plain data).
        format_version: the plan file format; a file of another version is refused with a
            message saying to profile again.
    """

    gpu_share: float
    cpu_actors: dict[str, int] = field(default_factory=dict)
    local_threads: int = 0
    window: int | None = None
    predicted: dict[str, float] = field(default_factory=dict)
    bottleneck: str = ""
    reason: str = ""
    measurements: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def __post_init__(self):
        if (
            not isinstance(self.gpu_share, (int, float))
            or isinstance(self.gpu_share, bool)
            or not 0 <= self.gpu_share <= 1
            or math.isnan(self.gpu_share)
        ):
            raise PlanFormatError(f"Plan: gpu_share must be in [0, 1], got {self.gpu_share!r}")
        if not isinstance(self.cpu_actors, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in self.cpu_actors.items()
        ):
            raise PlanFormatError(f"Plan: cpu_actors must map node ids to counts >= 0, got {self.cpu_actors!r}")
        if not isinstance(self.local_threads, int) or self.local_threads < 0:
            raise PlanFormatError(f"Plan: local_threads must be an int >= 0, got {self.local_threads!r}")
        if self.window is not None and (not isinstance(self.window, int) or self.window <= 0):
            raise PlanFormatError(f"Plan: window must be None or a positive int, got {self.window!r}")
        if self.format_version != FORMAT_VERSION:
            raise PlanFormatError(
                f"Plan: format_version {self.format_version!r} is not {FORMAT_VERSION}; "
                "run `hybridload profile` again to write a plan for this version"
            )

    @property
    def total_actors(self) -> int:
        return sum(self.cpu_actors.values())

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)
            f.write("\n")

    @classmethod
    def from_dict(cls, data: Any) -> "Plan":
        if not isinstance(data, dict):
            raise PlanFormatError(f"Plan: expected a JSON object, got {type(data).__name__}")
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise PlanFormatError(
                f"Plan: this file has format_version {version!r}, this hybridload reads "
                f"{FORMAT_VERSION}; run `hybridload profile` again to write a new plan"
            )
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PlanFormatError(
                f"Plan: unknown fields {unknown}; the file was not written by hybridload {FORMAT_VERSION}"
            )
        if "gpu_share" not in data:
            raise PlanFormatError("Plan: the file has no gpu_share")
        try:
            return cls(**data)
        except TypeError as exc:
            raise PlanFormatError(f"Plan: {exc}") from None

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Plan":
        try:
            with open(path) as f:
                data = json.load(f)
        except json.JSONDecodeError as exc:
            raise PlanFormatError(f"Plan: {path} is not valid JSON ({exc})") from None
        return cls.from_dict(data)
