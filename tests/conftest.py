"""Shared fixtures: small photo datasets and bad inputs, made once per session."""

from __future__ import annotations

import os

import pytest

from hybridload.cli.demo_data import make_photo_folder
from support.bad_files import make_bad_files

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


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
