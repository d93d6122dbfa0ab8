"""What ``profile`` and ``bench`` measured, as plain data (read by the tables and the plots)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hybridload.planner._gpu_reading import GpuReading, GpuUnavailable
from hybridload.planner._plan import Plan
from hybridload.planner._inputs import Limits, Measurements


@dataclass
class Profile:
    plan: Plan
    measurements: Measurements
    limits: Limits
    gpu: GpuReading | GpuUnavailable
    points: list[tuple[float, float]] = field(default_factory=list)  # (share, measured images/s)
    rows: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class ModeResult:
    mode: str
    label: str
    images_per_s: float
    batches: int
    images: int
    shares: dict = field(default_factory=dict)
    wait_fraction: float = 0.0
    step_ms: float = 0.0
    peak_rss_mb: float = 0.0
    peak_gpu_mb: float | None = None
    seconds: float = 0.0
    retries: int = 0
