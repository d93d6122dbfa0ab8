"""Labels from sources: integer class indices or an error naming the sample; skipped samples
keep the label that was read; ship_bytes honours on_error."""

import numpy as np
import pytest
import torch

from hybridload import recipe, sources
from hybridload.errors import LabelError, SampleError
from hybridload.lanes._cpu_job import process_batch
from hybridload.lanes._ray.lane import _Preloaded, ship
from hybridload.sources._torch_dataset import UNREAD_LABEL

REC = recipe.imagenet_eval(16)


class Labelled:
    """ds[i] -> (bytes of image i, label); image 2 is not an image, ds[3] raises."""

    def __init__(self, good: bytes, labels):
        self.good, self.labels = good, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        if i == 3:
            raise KeyError("no such record")
        return (b"not an image" if i == 2 else self.good), self.labels[i]


@pytest.fixture()
def good(bad_files):
    return open(bad_files["good"], "rb").read()


def test_skip_keeps_the_read_label_and_marks_an_unreadable_one(good):
    src = sources.TorchDataset(Labelled(good, [5, 6, 7, 8, 9]))
    res = process_batch(src, REC, [0, 1, 2, 3, 4], 0, 0, on_error="skip")
    assert res.labels.tolist() == [5, 6, 7, UNREAD_LABEL, 9]
    assert [s[0] for s in res.skipped] == [2, 3]
    loss = torch.nn.CrossEntropyLoss()(torch.zeros(5, 10), torch.from_numpy(res.labels))
    assert torch.isfinite(loss)  # -100 is CrossEntropyLoss's ignore_index


@pytest.mark.parametrize(
    "label, words",
    [
        ("cat", "got 'cat'"),
        (1.0, "got 1.0"),
        (np.array([0, 1, 0]), "shape \\(3,\\)"),
        (torch.tensor([0.0, 1.0]), "dtype torch.float32"),
    ],
)
def test_a_non_integer_label_names_the_sample_even_under_skip(good, label, words):
    src = sources.TorchDataset(Labelled(good, [0, label, 0, 0, 0]))
    with pytest.raises(LabelError, match=rf"sample 1 \(Labelled\[1\]\).*{words}"):
        process_batch(src, REC, [0, 1], 0, 0, on_error="skip")


def test_integer_like_labels_are_accepted(good):
    src = sources.TorchDataset(Labelled(good, [np.int64(1), torch.tensor(2), torch.tensor([3]), 4, 5]))
    assert process_batch(src, REC, [0, 1], 0, 0).labels.tolist() == [1, 2]
    assert src.read(src.ref(4))[1] == 5


def test_filelist_refuses_string_and_float_labels_naming_the_sample():
    with pytest.raises(ValueError, match=r"sample 0 \(a.jpg\) has label 'cat'"):
        sources.FileList(["a.jpg", "b.jpg"], ["cat", "dog"])
    with pytest.raises(ValueError, match=r"sample 1 \(b.jpg\) has label 2.5"):
        sources.FileList(["a.jpg", "b.jpg"], [1.0, 2.5])


def test_ship_bytes_turns_a_missing_file_into_a_skipped_sample(photo_root, bad_files):
    src = sources.FileList([bad_files["good"], bad_files["missing"], bad_files["good"]], [4, 5, 6])
    shipped = ship(src, [0, 1, 2])
    assert isinstance(shipped[1][0], SampleError)
    res = process_batch(_Preloaded(src, shipped), REC, [0, 1, 2], 0, 0, on_error="skip")
    assert res.labels.tolist() == [4, 5, 6] and [s[0] for s in res.skipped] == [1]
    with pytest.raises(SampleError, match="stage 'read'"):
        process_batch(_Preloaded(src, shipped), REC, [0, 1, 2], 0, 0, on_error="raise")


def test_ship_bytes_carries_a_torch_dataset_label_to_the_worker(good):
    src = sources.TorchDataset(Labelled(good, [5, 6, 7, 8, 9]))
    shipped = ship(src, [0, 2])
    worker_copy = sources.TorchDataset(Labelled(good, [5, 6, 7, 8, 9]))
    res = process_batch(_Preloaded(worker_copy, shipped), REC, [0, 2], 0, 0, on_error="skip")
    assert res.labels.tolist() == [5, 7]
