"""The planner: GPU headroom (NVML), lane rates, and the split as a plan file."""

from hybridload.planner.nvml import GpuReading, GpuUnavailable, read_gpu
from hybridload.planner.plan import FORMAT_VERSION, Plan, PlanFormatError
from hybridload.planner.solver import Limits, Measurements, NodeRate, bounds, plan_at, predict, solve, sweep
from hybridload.planner.calibrate import calibrate, predict_check

__all__ = ["GpuReading", "GpuUnavailable", "read_gpu", "FORMAT_VERSION", "Plan", "PlanFormatError",
           "Limits", "Measurements", "NodeRate", "bounds", "plan_at", "predict", "solve", "sweep", "calibrate",
           "predict_check"]
