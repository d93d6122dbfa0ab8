"""Shared fixtures: small photo datasets and bad inputs, made once per session."""

from __future__ import annotations

import faulthandler
import os
import re

import pytest

from hybridload.cli.demo_data import make_photo_folder
from support.bad_files import make_bad_files

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# the tests' own Ray clusters run their workers at the test's priority, as the embedded cluster
# does: at Ray's nice 15 the other pytest-xdist worker starved their actors' starts (timeouts)
os.environ.setdefault("RAY_worker_niceness", "0")

#: a test still running this long after it began is stuck where pytest-timeout's signal (600 s,
#: pyproject.toml) cannot reach it: inside a C++ wait of Ray's, which never returns to Python
WEDGED_S = 900


#: what puts a test module in a tier of its own: it starts Ray (a cluster, an actor pool, a
#: drop-in on actors), or processes of its own (gloo ranks, torchrun, mp.spawn, the CLI)
TIER_PATTERNS = {
    "ray": re.compile(
        r"\bimport ray\b|\bray_cluster\b|\bray\.init\b|\bCluster\(|\bcpu_actors\s*=\s*[1-9]"
        r"|distribute_mode\s*=\s*True|\bRAY_ADDRESS\b|\bray_address\b"
    ),
    "subprocess": re.compile(
        r"\bsubprocess\b|\bmultiprocessing\b|\bmp\.spawn\b|\btorchrun\b"
        r"|\brun_job\b|\brun_ranks\b|\bPopen\b|\bos\.fork\b|local_workers\s*=\s*\"processes\"|\bzygote\b"
    ),
}


#: a module whose source names Ray or processes (policies, specs, plans) but starts neither says
#: so with ``pytestmark = pytest.mark.starts_nothing``, and stays in the fast tier
STARTS_NOTHING = re.compile(r"^pytestmark\s*=.*\bpytest\.mark\.starts_nothing\b", re.M)


def tiers_of(source: str) -> set[str]:
    """Pure: the tiers (markers) a test module's source puts its tests in."""
    if STARTS_NOTHING.search(source):
        return set()
    return {name for name, pattern in TIER_PATTERNS.items() if pattern.search(source)}


def queue_rank(markers: set[str]) -> int:
    """Pure: where a test module whose tests carry ``markers`` stands in the queue that
    pytest-xdist's workers take modules from (``make test``), lowest first: a module with a slow
    test, then one that starts Ray or processes, the fast tier last. Long modules handed out
    first and short ones left to fill the gaps keep both workers busy to the end, instead of
    one running a long module alone after the other ran out of work."""
    if "slow" in markers:
        return 0
    if markers & {"ray", "subprocess"}:
        return 1
    return 2


def pytest_collection_modifyitems(config, items):
    """Mark every test by what its module starts (``make test-fast`` leaves those out); a
    module may add ``slow`` or ``gpu`` itself (``pytestmark``). In a pytest-xdist worker, order
    the modules by ``queue_rank`` (each worker collects, and sorts, alike; within a module the
    order is the file's)."""
    seen: dict[str, set[str]] = {}
    for item in items:
        path = str(item.path)
        if path not in seen:
            with open(path, encoding="utf-8") as f:
                seen[path] = tiers_of(f.read())
        for name in seen[path]:
            item.add_marker(getattr(pytest.mark, name))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        markers: dict[str, set[str]] = {}
        for item in items:
            markers.setdefault(str(item.path), set()).update(m.name for m in item.iter_markers())
        items.sort(key=lambda item: queue_rank(markers[str(item.path)]))  # stable: a module stays whole


@pytest.fixture(autouse=True)
def _torch_worker_info_back():
    """A test that runs a drop-in worker in this process sets torch's ``get_worker_info()`` for
    it; put it back, or a later test's torch or webdataset code believes it runs in a worker."""
    import torch.utils.data._utils.worker as torch_worker

    saved = torch_worker._worker_info
    yield
    torch_worker._worker_info = saved


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
    """Named bad inputs next to one good JPEG: {kind: path} (kinds: tests/support/bad_files.py)."""
    good = sorted(
        p for d, _, fs in os.walk(photo_root) for p in (os.path.join(d, f) for f in fs) if p.endswith(".jpg")
    )[0]
    return make_bad_files(tmp_path_factory.mktemp("bad"), good)


@pytest.fixture(scope="session")
def zygote():
    """Runs a script as ``python script.py`` (or ``python -c``) in a child forked from one
    interpreter that imported torch already: a test that runs a script as written, and is not about
    the interpreter's start, exit or signals, skips torch's import (2-3 CPU-seconds) per run
    (tests/support/zygote.py)."""
    from support.zygote import Zygote

    z = Zygote()
    yield z
    z.close()
