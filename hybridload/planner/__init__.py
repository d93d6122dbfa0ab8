"""The planner: GPU headroom (NVML), lane rates, and the split as a plan file.

``_nvml`` (reading the trainer's GPU), ``_gpu_reading`` (what it read) and ``_monitor``
(sampling it in the background), ``_rates`` (measuring lane rates on the user's data),
``_inputs`` (what the solver is given: measurements, limits), ``_solver`` (the split as a pure
function of the measurements), ``_calibrate`` (the model fitted to the loader measured for
real), ``_plan`` (the decision as a versioned JSON file), ``_fit`` (a plan made elsewhere,
fitted to where it runs) and ``_online`` (re-planning the GPU share from live lane rates).
"""

from hybridload.planner._gpu_reading import GpuReading, GpuUnavailable
from hybridload.planner._nvml import read_gpu
from hybridload.planner._plan import FORMAT_VERSION, Plan, PlanFormatError
from hybridload.planner._inputs import Limits, Measurements, NodeRate
from hybridload.planner._solver import bounds, plan_at, predict, solve, sweep
from hybridload.planner._calibrate import calibrate, predict_check

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
