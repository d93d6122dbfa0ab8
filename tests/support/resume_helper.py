"""One helper that checks save/load of state for every stateful piece (torchdata style).

A stateful piece has ``set_epoch``, ``__iter__``, ``state_dict`` and ``load_state_dict``.
The helper saves state at several points mid-epoch, at an epoch's end and in a later
epoch, resumes a fresh instance from it (after a JSON round trip: state is plain data),
and checks that the resumed stream equals the uninterrupted one.
"""

from __future__ import annotations

import json


def _drain(obj, key, epochs):
    out = []
    for e in epochs:
        obj.set_epoch(e)
        out.append([key(x) for x in obj])
    return out


def check_resume(make, *, key=lambda item: item, epochs: int = 2, close=lambda obj: None):
    """Raise AssertionError unless every resume point reproduces the uninterrupted stream."""
    ref_obj = make()
    reference = _drain(ref_obj, key, range(epochs))
    close(ref_obj)
    n = len(reference[0])
    assert n >= 3, "check_resume needs at least 3 items per epoch to test mid-epoch points"
    points = [(0, 0), (0, 1), (0, n // 2), (0, n - 1), (0, n), (epochs - 1, n // 2)]
    for epoch, k in points:
        a = make()
        _drain(a, key, range(epoch))
        a.set_epoch(epoch)
        it = iter(a)
        head = [key(next(it)) for _ in range(k)]
        state = json.loads(json.dumps(a.state_dict()))
        del it
        close(a)
        b = make()
        b.load_state_dict(state)
        rest = _drain(b, key, range(epoch, epochs))
        close(b)
        assert head + rest[0] == reference[epoch], f"resume at epoch {epoch}, item {k} changed that epoch's stream"
        assert rest[1:] == reference[epoch + 1 :], f"resume at epoch {epoch}, item {k} changed later epochs"
