"""Shared fixtures: small photo datasets and bad inputs, made once per session."""

from __future__ import annotations

import faulthandler
import os

import pytest

from hybridload.cli.demo_data import make_photo_folder
from support.bad_files import make_bad_files

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

#: a test still running this long after it began is stuck where pytest-timeout's signal (600 s,
#: pyproject.toml) cannot reach it: inside a C++ wait of Ray's, which never returns to Python
WEDGED_S = 900


@pytest.fixture(autouse=True)
def _end_a_wedged_session():
    """Past WEDGED_S, print every thread's stack and end the session (exit 1), instead of
    holding the run until CI's own limit with nothing to say where it stopped."""
    faulthandler.dump_traceback_later(WEDGED_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def ray_cluster():
    """A simulated 3-node Ray cluster on loopback, shared by every test that asks for it:
    (cluster, [worker nodes]); the driver is connected to the head (the trainer's node)."""
    from support.ray_fixtures import three_node_cluster
    with three_node_cluster(head_cpus=2, worker_cpus=1) as c:
        yield c


@pytest.fixture(scope="session")
def photo_root(tmp_path_factory):
    """An ImageFolder tree of 60 photo JPEGs in 3 classes."""
    return str(make_photo_folder(tmp_path_factory.mktemp("photos"), 60, num_classes=3, seed=1))


@pytest.fixture(scope="session")
def bad_files(tmp_path_factory, photo_root):
    """Named bad inputs next to one good JPEG: {kind: path} (kinds: support.bad_files)."""
    good = sorted(p for d, _, fs in os.walk(photo_root) for p in (os.path.join(d, f) for f in fs)
                  if p.endswith(".jpg"))[0]
    return make_bad_files(tmp_path_factory.mktemp("bad"), good)
