"""The torch drop-in ``hybridload.DataLoader``, a package of its own on the execution core's
public names (the faces of ``execution``, ``lanes``, ``lanes.ray``, ``sampling``, and
``errors``; ``tests/test_architecture.py`` holds it to them).

``loader`` (`DataLoader`), ``passes`` (a pass on Ray actors: `RayPass`, `FailedPass`), ``handles`` (its actors as torch's
``_workers``),
``inprocess`` (a pass run in this process instead), ``hosted`` (an ``IterableDataset``'s
workers run in this process beside live pools, torch's stream), ``pools`` (the actor pools of a map-style
dataset and of an ``IterableDataset``), ``startup`` (a pass's pool started from the loader's
arguments), ``worker`` (a map-style dataset's actor: what one torch worker process does, user
errors as values), ``iterable_worker`` and ``iterable_pass`` (an
``IterableDataset`` on actors, in torch's order), ``progress`` (the batches delivered, for
``state_dict()``), ``seeds`` (what a pass draws from ``generator``, in torch's order) and ``travel`` (what of a dataset cannot be pickled to the actors).
"""

from hybridload.dataloader.loader import DataLoader

__all__ = ["DataLoader"]
