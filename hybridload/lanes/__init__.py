"""Lanes: the engines' drivers that turn batch tasks into results, behind one small contract
(`Lane`), so the dispatcher never asks which lane it has.

Modules: ``base`` (the contract, the `Lane` template, `BatchTask`), ``spec`` (which lanes a loader
runs, as data), ``build`` (building them), ``cpu_job`` (the CPU lanes' batch job, the planner's
probe's too), ``once`` (notes about this machine, once per process), ``batch_buffers`` (the kept
buffers the local and Ray lanes deliver batches in), and one sub-package per kind: ``local`` (this
machine's CPUs), ``ray`` (CPU actors on a Ray cluster) and ``gpu`` (the DALI and torch engines)."""

from hybridload.lanes.base import BatchTask, Lane
from hybridload.lanes.local.inprocess import InProcessLane

__all__ = ["BatchTask", "Lane", "InProcessLane"]
