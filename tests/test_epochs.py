"""epochs.endless: one pass per epoch, set_epoch(epoch + 1) between passes, without end."""

import itertools

import pytest

from hybridload.sampling._epochs import endless


class FakeLoader:
    def __init__(self, n, epoch=0):
        self.n, self.epoch, self.calls = n, epoch, []

    def __len__(self):
        return self.n

    def set_epoch(self, epoch):
        self.calls.append(epoch)
        self.epoch = epoch

    def __iter__(self):
        return iter([(self.epoch, k) for k in range(self.n)])


def test_endless_advances_the_epoch_after_each_full_pass():
    ld = FakeLoader(2, epoch=5)
    got = list(itertools.islice(endless(ld), 7))
    assert got == [(5, 0), (5, 1), (6, 0), (6, 1), (7, 0), (7, 1), (8, 0)]
    assert ld.calls == [6, 7, 8]


def test_endless_refuses_a_loader_without_batches():
    with pytest.raises(ValueError, match="no batches"):
        next(endless(FakeLoader(0)))
