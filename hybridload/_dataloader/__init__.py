"""The torch drop-in ``hybridload.DataLoader``, a package on the core's public names only
(``tests/test_architecture.py`` holds it to them); where it matches torch and where it differs:
docs/guide/dropin.md.

Modules: ``loader`` (`DataLoader`), ``passes`` (a pass on Ray actors: `RayPass`, `FailedPass`),
``handles`` (its actors as torch's ``_workers``), ``inprocess`` (a pass run in this process
instead), ``hosted`` (an ``IterableDataset``'s workers run here beside live pools), ``pools`` (the
actor pools of a map-style dataset and of an ``IterableDataset``), ``startup`` (a pass's pool from
the loader's arguments), ``worker`` (a map-style dataset's actor, user errors as values),
``iterable_worker`` and ``iterable_pass`` (an ``IterableDataset`` on actors, in torch's order),
``progress`` (the batches delivered, for ``state_dict()``), ``seeds`` (what a pass draws from
``generator``) and ``travel`` (what of a dataset cannot be pickled to the actors)."""

from hybridload._dataloader.loader import DataLoader

__all__ = ["DataLoader"]
