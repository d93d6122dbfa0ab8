"""Which user modules travel by value to Ray workers (hybridload.raycluster._shipping), decided
on this interpreter's real search path; the end-to-end case (a dataset from a folder put on
sys.path, on a Ray cluster, against torch's DataLoader) is in test_dataloader_parity.py."""

import collections
import json
import sys
import time

import torch

from hybridload.raycluster._shipping import importable_by_workers, referenced_modules, worker_search_path


def test_the_workers_path_is_a_fresh_interpreters_and_read_once():
    t0 = time.perf_counter()
    path = worker_search_path()
    assert time.perf_counter() - t0 < 30 and worker_search_path() is path  # cached: one subprocess per process
    assert any(p.endswith("site-packages") for p in path)
    assert importable_by_workers("torch.utils.data", path) and importable_by_workers("json", path)
    assert importable_by_workers("sys", path)  # built in


def test_spawned_mains_and_unknown_modules_travel_by_value_main_stays_with_cloudpickle():
    path = worker_search_path()
    assert not importable_by_workers("__mp_main__", path)  # a spawned child's script: never importable there
    assert not importable_by_workers("no_such_module_anywhere.sub", path)
    assert importable_by_workers("__main__", path)  # cloudpickle already ships __main__ by value


Pair = collections.namedtuple("Pair", "a b")


def test_the_modules_an_objects_pickle_refers_to_are_found_inside_containers():
    found = referenced_modules({"k": [Pair(json.dumps, torch.zeros(2))]})
    assert {__name__, "json", "torch"} <= {m.partition(".")[0] if m.startswith("torch") else m for m in found}
    assert sys.modules[__name__].__name__ in found


def test_a_package_found_only_through_an_import_hook_is_importable_by_workers():
    """An editable install (``pip install -e``) is found by a finder on ``sys.meta_path``, not
    by a folder of ``sys.path``: with no folder to search, hybridload itself (installed so in
    the test venv) must still count as importable, or every Ray lane would ship the whole
    package by value, locks and all."""
    from hybridload.raycluster._shipping import importable_by_workers

    assert importable_by_workers("hybridload.sources._folder", ())
    assert not importable_by_workers("no_such_package_here", ())
