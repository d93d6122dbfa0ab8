"""Lanes: the engines' drivers that turn batch tasks into results, behind one small contract
(`Lane`), so the dispatcher never asks which lane it has.

Modules: ``_base`` (the contract, the `Lane` template, `BatchTask`), ``_spec`` (which lanes a loader
runs, as data), ``_build`` (building them), ``_cpu_job`` (the CPU lanes' batch job, the planner's
probe's too), ``_once`` (notes about this machine, once per process), ``_batch_buffers`` (the kept
buffers the local and Ray lanes deliver batches in), and one sub-package per kind: ``_local`` (this
machine's CPUs), ``_ray`` (CPU actors on a Ray cluster) and ``_gpu`` (the DALI and torch engines)."""

from hybridload.lanes._base import BatchTask, Lane
from hybridload.lanes._local.inprocess import InProcessLane

__all__ = ["BatchTask", "Lane", "InProcessLane"]
