"""The in-process lane's threads and torch's intra-op threads (issue 35.7); its batch buffers (issue 37)."""

import gc
import sys
import threading
import weakref

import numpy as np
import pytest
import torch

from hybridload import recipe, sources
from hybridload.lanes._base import BatchTask
from hybridload.lanes._local.inprocess import InProcessLane
from support.pictures import kept_buffer_pages, minor_faults, picture_loader


class _SeesThreads:
    """Records torch's intra-op thread count where each sample is read."""

    def __init__(self):
        self.seen = []

    def __len__(self):
        return 8

    def __getitem__(self, i):
        self.seen.append((threading.current_thread().name, torch.get_num_threads()))
        return np.full((40, 40, 3), i, np.uint8), i


def _new_thread_sees() -> int:
    box = []
    t = threading.Thread(target=lambda: box.append(torch.get_num_threads()))
    t.start()
    t.join(30)
    return box[0]


def test_a_one_thread_lane_runs_torch_on_its_own_thread_and_leaves_the_trainers_setting():
    """A one-thread lane on the process's intra-op threads ran 5-12x slower than two lane threads
    (RESULTS.md): its thread runs torch on one intra-op thread; the trainer's thread and threads
    started later keep the process's count."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # as on the 2-core box (the test machine may have more)
    ds = _SeesThreads()
    lane = InProcessLane(sources.TorchDataset(ds), recipe.imagenet_eval(32), threads=1)
    try:
        lane.run_batch(BatchTask(0, 0, np.arange(2)))  # on this thread: the trainer's count
        done = threading.Event()
        lane.submit(BatchTask(1, 0, np.arange(2, 4)), lambda t, out: done.set())
        assert done.wait(60), "the lane's batch did not finish within 60 s"
        lane_counts = {n for name, n in ds.seen if name.startswith("hybridload-inprocess")}
        main_counts = {n for name, n in ds.seen if name == threading.current_thread().name}
        assert lane_counts == {1} and main_counts == {2}, ds.seen
        assert torch.get_num_threads() == 2 and _new_thread_sees() == 2
    finally:
        lane.close()
        torch.set_num_threads(before)


def test_a_delivered_batch_is_released_once_the_consumer_drops_it():
    """Nothing of the lane or the dispatcher holds a delivered batch (a finished future reaching
    itself through its callback held each batch until the cyclic collector ran): with the
    collector off, a dropped batch is gone three batches later, so its buffer is written again."""
    gc.disable()
    try:
        with picture_loader(4) as ld:
            for _ in range(2):
                seen = []
                for k, (images, _labels) in enumerate(ld):
                    seen.append(weakref.ref(images))
                    del images, _labels
                    if k >= 3:
                        assert seen[k - 3]() is None, f"batch {k - 3} is still held after batch {k} was taken"
    finally:
        gc.enable()


def test_a_held_batch_is_never_overwritten_by_a_later_one():
    """Batches kept by the consumer (all of two passes) keep their pixels: a buffer is lent again
    only once nothing can read its batch."""
    from hybridload.lanes._cpu_job import process_batch

    with picture_loader(8, return_indices=True) as ld:
        held = []
        for epoch in range(2):
            ld.set_epoch(epoch)
            held += [(epoch, images, idx) for images, _labels, idx in ld]
        for epoch, images, idx in held:
            want = process_batch(ld.source, ld.recipe, idx.numpy(), 3, epoch).images
            assert torch.equal(images, want), f"epoch {epoch} batch {idx.tolist()} was overwritten"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads a thread's page faults from /proc")
def test_a_pass_writes_its_batches_into_pages_already_mapped():
    """A fresh 32 x 3 x 224 x 224 batch made on the lane's thread and freed on the consumer's came
    from new pages each batch (1,176 page faults: 8-16% of the kernel's time on one thread); kept
    buffers are written again instead. Faults of the lane's thread over a pass after two warm
    ones: under a quarter of one batch's pages per batch."""
    pages = 32 * 3 * 224 * 224 // 4096
    with picture_loader(32) as ld:
        for _ in range(2):
            for _ in ld:
                pass
        (lane,) = [t for t in threading.enumerate() if t.name.startswith("hybridload-inprocess")]
        before, kept = minor_faults(lane.native_id), kept_buffer_pages(ld)
        batches = sum(1 for _ in ld)
        grown = kept_buffer_pages(ld) - kept  # a buffer kept on this pass is mapped once, then kept
        per_batch = (minor_faults(lane.native_id) - before - grown) / batches
    assert per_batch < pages / 4, f"the lane's thread faulted in {per_batch:.0f} pages a batch (a batch is {pages})"
