"""User code the Ray workers cannot import travels by value (cloudpickle's
``register_pickle_by_value``), as ``__main__``'s does, instead of killing every actor with
``ModuleNotFoundError`` (docs/decisions/dropin-by-value.md)."""

from __future__ import annotations

import functools
import importlib.machinery
import json
import logging
import os
import subprocess
import sys
import types

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def worker_search_path() -> tuple[str, ...]:
    """The folders a Ray worker started from this interpreter imports from: a fresh
    interpreter's ``sys.path`` (same executable and environment), the script's folder and the
    working directory (both added by Ray for its workers)."""
    try:
        out = subprocess.run(
            [sys.executable, "-c", "import sys, json; print(json.dumps(sys.path[1:]))"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            cwd="/",
        ).stdout
        fresh = json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        log.warning(
            "could not read a fresh interpreter's sys.path (%s): shipping by value every module outside site-packages",
            exc,
        )
        fresh = [p for p in sys.path if "site-packages" in p or p.startswith(sys.base_prefix)]
    script_dir = os.path.dirname(os.path.realpath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
    return tuple(p for p in [*fresh, script_dir, os.getcwd()] if p)


def importable_by_workers(module_name: str, search_path: tuple[str, ...]) -> bool:
    """Whether a worker with ``search_path`` finds ``module_name``'s top-level package."""
    top = module_name.partition(".")[0]
    if top in sys.builtin_module_names or module_name == "__main__":  # __main__: cloudpickle ships it by value
        return True
    if top == "__mp_main__":
        return False
    if importlib.machinery.PathFinder.find_spec(top, list(search_path)) is not None:
        return True
    return top in _found_by_import_hooks(top)


@functools.lru_cache(maxsize=None)
def _found_by_import_hooks(top: str) -> frozenset:
    """``{top}`` when a fresh interpreter finds it through its import hooks (an editable install's
    finder, which ``sys.path`` does not show), else empty."""
    code = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({top!r}) else 1)"
    try:
        found = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, cwd="/").returncode == 0
    except (OSError, subprocess.SubprocessError):
        found = False
    return frozenset({top}) if found else frozenset()


def referenced_modules(obj) -> set[str]:
    """The modules whose classes and functions ``obj``'s pickle refers to (pickled once into a
    sink that keeps nothing)."""
    from ray import cloudpickle

    class Scan(cloudpickle.Pickler):
        found: set[str]

        def reducer_override(self, o):
            if isinstance(o, (type, types.FunctionType)):
                name = getattr(o, "__module__", None)
            else:
                name = type(o).__module__
            if isinstance(name, str):
                self.found.add(name)
            return super().reducer_override(o)

    class Sink:
        def write(self, b):
            return len(b)

    scan = Scan(Sink(), protocol=5, buffer_callback=lambda b: None)
    scan.found = set()
    scan.dump(obj)
    return scan.found


def ship_unimportable(objs) -> list[str]:
    """Register with Ray's cloudpickle, by value, every module of user code in ``objs`` that a
    Ray worker cannot import; returns their names (top-level packages). Call before the
    objects are put in the object store. An object that cannot be pickled is left to Ray's
    own error."""
    from ray import cloudpickle

    try:
        names = referenced_modules(objs)
    except Exception:  # noqa: BLE001 - ray.put reports it with Ray's own message
        return []
    path = worker_search_path()
    shipped = []
    for name in sorted(names):
        top = name.partition(".")[0]
        if importable_by_workers(name, path) or top in shipped:
            continue
        module = sys.modules.get(top) or sys.modules.get(name)
        if module is None:
            continue
        cloudpickle.register_pickle_by_value(module)
        shipped.append(top)
        log.info("module %r is not importable by the Ray workers (not on their sys.path): it travels by value", top)
    return shipped
