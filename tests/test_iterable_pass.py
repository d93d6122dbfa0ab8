"""An IterableDataset pass on Ray actors ends with `WorkerLost` when an actor is lost (here at the
pass's start, before any batch was taken), naming what happened: Ray's own exceptions (recorded, raised by a stand-in actor handle: no cluster is
started here) for an actor that died and for one Ray could not reach for a moment."""

import pytest
import ray.exceptions

from hybridload._dataloader.iterable_pass import IterablePass
from hybridload.errors import WorkerLost

pytestmark = pytest.mark.starts_nothing


class _Refuses:
    """An actor handle whose ``begin.remote`` raises ``exc``, as Ray does for a lost actor."""

    def __init__(self, exc):
        exc_ = exc

        class _Method:
            @staticmethod
            def remote(*_):
                raise exc_

        self.begin = _Method


@pytest.mark.parametrize(
    "exc, said",
    [
        (ray.exceptions.ActorDiedError(), "died (starting the pass)"),
        (ray.exceptions.ActorUnavailableError("the connection broke", None), "could not be reached"),
    ],
    ids=["died", "unavailable"],
)
def test_a_lost_actor_ends_the_pass_with_worker_lost_naming_how_it_was_lost(exc, said):
    with pytest.raises(WorkerLost) as got:
        IterablePass({0: _Refuses(exc)}, 7, prefetch=1, timeout_s=5)
    msg = str(got.value)
    assert said in msg and "cannot move to another worker" in msg, msg
    assert ("died" in msg) != ("could not be reached" in msg), msg  # one of the two, never both
