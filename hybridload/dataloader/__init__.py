"""The torch drop-in ``hybridload.DataLoader`` (`loader`) and its
passes on Ray actors (`passes`)."""

from hybridload.dataloader.loader import DataLoader

__all__ = ["DataLoader"]
