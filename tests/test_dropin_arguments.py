"""The drop-in's Ray arguments are checked when the loader is made, with a message that names
the argument and what to write (a misspelt placement used to run as "remote-first"). No Ray:
the loader is refused before any pass starts."""

import pytest
import torch

import hybridload


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i * i


@pytest.mark.parametrize(
    "kw, words",
    [
        (
            dict(placement="remote"),
            r"hybridload.DataLoader: placement must be one of 'remote-first', 'any', 'local'; "
            r"got 'remote'",
        ),
        (dict(reserve_local_cpus=-1), r"hybridload.DataLoader: reserve_local_cpus must be a whole number of CPUs >= 0"),
        (dict(num_actors=-2), r"hybridload.DataLoader: num_actors must be a whole number >= 0, or None .*got -2"),
    ],
)
def test_a_bad_ray_argument_of_the_drop_in_is_refused_when_the_loader_is_made(kw, words):
    with pytest.raises(ValueError, match=words):
        hybridload.DataLoader(Squares(), batch_size=2, distribute_mode=True, **kw)


def test_a_pass_on_actors_waits_the_default_bound_for_timeout_0_and_the_users_seconds_otherwise():
    from hybridload._dataloader.passes import DEFAULT_TIMEOUT_S, PassSettings

    assert PassSettings(window=None, timeout=0, prefetch=2).timeout_s == DEFAULT_TIMEOUT_S == 300.0
    assert PassSettings(window=4, timeout=-1, prefetch=2).timeout_s == DEFAULT_TIMEOUT_S
    assert PassSettings(window=4, timeout=12.5, prefetch=2).timeout_s == 12.5


def test_a_batch_size_past_what_python_slices_take_is_refused_when_the_drop_in_is_made():
    """torch's BatchSampler takes 2**63 and fails at iter() in islice(), naming neither the argument
    nor what to write."""
    with pytest.raises(ValueError, match=r"batch_size should be a positive integer value at most sys.maxsize"):
        hybridload.DataLoader(Squares(), batch_size=2**63)
    assert [b.tolist() for b in hybridload.DataLoader(Squares(), batch_size=2**63 - 1)] == [[0, 1, 4, 9]]
