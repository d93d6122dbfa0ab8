"""The torch drop-in ``hybridload.DataLoader`` (:mod:`~hybridload.dataloader.loader`) and its
passes on Ray actors (:mod:`~hybridload.dataloader.passes`)."""

from hybridload.dataloader.loader import DataLoader

__all__ = ["DataLoader"]
