"""The planner: GPU headroom (NVML), lane rates, and the split as a plan file.

``nvml`` (reading the trainer's GPU), ``gpu_reading`` (what it read) and ``monitor``
(sampling it in the background), ``rates`` (measuring lane rates on the user's data),
``inputs`` (what the solver is given: measurements, limits), ``solver`` (the split as a pure
function of the measurements), ``calibrate`` (the model fitted to the loader measured for
real), ``plan`` (the decision as a versioned JSON file), ``fit`` (a plan made elsewhere,
fitted to where it runs) and ``online`` (re-planning the GPU share from live lane rates).
"""

from hybridload.planner.gpu_reading import GpuReading, GpuUnavailable
from hybridload.planner.nvml import read_gpu
from hybridload.planner.plan import FORMAT_VERSION, Plan, PlanFormatError
from hybridload.planner.inputs import Limits, Measurements, NodeRate
from hybridload.planner.solver import bounds, plan_at, predict, solve, sweep
from hybridload.planner.calibrate import calibrate, predict_check

__all__ = [
    "GpuReading",
    "GpuUnavailable",
    "read_gpu",
    "FORMAT_VERSION",
    "Plan",
    "PlanFormatError",
    "Limits",
    "Measurements",
    "NodeRate",
    "bounds",
    "plan_at",
    "predict",
    "solve",
    "sweep",
    "calibrate",
    "predict_check",
]
