"""The lanes' kept batch buffers (`hybridload.lanes._batch_buffers`): a buffer is
written again only once nothing can read the batch it was lent to (issue 37)."""

import numpy as np
import pytest
import torch

from hybridload.lanes._batch_buffers import BatchBuffers

SHAPE = (4, 3, 8, 8)


def test_a_buffer_is_lent_again_once_its_batch_is_dropped():
    pool = BatchBuffers(2)
    a = pool.take(SHAPE)
    ptr = a.data_ptr()
    b = pool.take(SHAPE)
    assert b.data_ptr() != ptr and pool.held() == 2
    del a
    assert pool.held() == 1
    assert pool.take(SHAPE).data_ptr() == ptr


@pytest.mark.parametrize(
    "keep_alive",
    [
        lambda t: t[1],  # a torch view
        lambda t: t.numpy()[2],  # a NumPy view of it
        lambda t: t.untyped_storage(),  # its storage
        lambda t: t.view(-1),  # a reshaped view
    ],
    ids=["torch view", "numpy view", "storage", "reshape"],
)
def test_anything_that_can_read_a_batch_keeps_its_buffer_from_being_written(keep_alive):
    pool = BatchBuffers(1)
    t = pool.take(SHAPE)
    t.fill_(7)
    ptr = t.data_ptr()
    held = keep_alive(t)
    del t
    other = pool.take(SHAPE)
    other.fill_(0)
    assert other.data_ptr() != ptr and pool.held() == 1
    assert torch.as_tensor(np.asarray(held) if not isinstance(held, torch.Tensor) else held).eq(7).all()
    del held
    assert pool.held() == 0


def test_the_buffers_kept_are_bounded_by_keep():
    pool = BatchBuffers(2)
    held = [pool.take(SHAPE) for _ in range(5)]  # the three beyond keep are fresh memory
    assert pool.held() == 2 and len({t.data_ptr() for t in held}) == 5
    del held
    assert pool.held() == 0
    assert len({pool.take(SHAPE).data_ptr() for _ in range(4)}) <= 2


def test_a_new_shape_drops_the_idle_buffers_of_the_old_one():
    pool = BatchBuffers(2)
    old = pool.take(SHAPE)
    pool.take(SHAPE)  # dropped at once: idle
    new = pool.take((2, 3, 8, 8))
    assert tuple(new.shape) == (2, 3, 8, 8) and new.dtype == torch.uint8
    assert pool.held() == 2  # the held old one stays held (its holder owns it), the idle one is gone
    del old, new
    assert pool.held() == 0


@pytest.mark.parametrize("keep", [-1, 1.5, True, "2"])
def test_a_bad_keep_is_refused_naming_it(keep):
    with pytest.raises(ValueError, match="keep must be an int >= 0"):
        BatchBuffers(keep)


def test_a_lane_keeps_a_buffer_for_each_batch_the_default_window_lets_it_have_out():
    from hybridload.execution._stream import default_window
    from hybridload.lanes._batch_buffers import keep_for

    class Lane:
        slots = 3

    assert keep_for(3) == default_window([Lane()]) + 2  # the window's batches, the consumer's and the next
