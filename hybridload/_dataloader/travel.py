"""What of a drop-in DataLoader cannot travel to its actors, named: Ray's own error names neither
the part nor the attribute, so on that failure path each part, then its attributes depth first, is
pickled alone (a standard-library object such as a lock is named itself, not its insides)."""

from __future__ import annotations

from typing import Any


def _fails(obj: Any) -> BaseException | None:
    from ray import cloudpickle

    try:
        cloudpickle.dumps(obj)
    except Exception as exc:
        return exc
    return None


def _standard_library(cls: type) -> bool:
    """Whether ``cls`` comes with Python (its insides are not the user's to mend)."""
    import sys

    return cls.__module__.split(".")[0] in sys.stdlib_module_names


def describe(dataset: Any) -> str:
    """``Subset of Locked`` for a wrapper over another dataset, else the class name."""
    inner = getattr(dataset, "dataset", None)
    name = type(dataset).__name__
    return f"{name} of {describe(inner)}" if inner is not None and inner is not dataset else name


def culprit(obj: Any, path: str, depth: int = 4) -> tuple[str, Any, BaseException] | None:
    """(path, object, error) of the deepest attribute of ``obj`` that cannot be pickled; None when it pickles."""
    exc = _fails(obj)
    if exc is None:
        return None
    if depth > 0 and not _standard_library(type(obj)):  # a multiprocessing.Value is named, not its mmap
        for name, value in list(getattr(obj, "__dict__", {}).items()):
            found = culprit(value, f"{path}.{name}", depth - 1)
            if found is not None:
                return found
    return path, obj, exc


def unpicklable_error(bundle: tuple, cause: BaseException) -> TypeError:
    """The error for a ``(dataset, collate_fn, worker_init_fn)`` Ray could not pickle: what and where."""
    dataset = bundle[0]
    for part, name in zip(bundle, ("dataset", "collate_fn", "worker_init_fn")):
        found = culprit(part, name)
        if found is not None:
            path, obj, exc = found
            what = f"the dataset ({describe(dataset)})" if name == "dataset" else name
            return TypeError(
                f"hybridload.DataLoader: {what} cannot be sent to the Ray actors: {path} (a {type(obj).__name__}) "
                f"cannot be pickled ({type(exc).__name__}: {exc}). Create such objects in the worker instead "
                "(lazily in __getitem__, or in worker_init_fn), or give the class __getstate__/__setstate__ that "
                "leave them out; distribute_mode=False keeps torch's worker processes"
            )
    return TypeError(
        f"hybridload.DataLoader: the dataset ({describe(dataset)}), collate_fn and worker_init_fn "
        f"cannot be sent to the Ray actors together: {str(cause).splitlines()[0]}"
    )


def travel_error(bundle: tuple) -> TypeError | None:
    """The named error for a bundle that cannot be pickled as one; None when it pickles. Also asked
    for a pass that would run here, so the answer never depends on a free CPU."""
    exc = _fails(bundle)
    return None if exc is None else unpicklable_error(bundle, exc)


def _by_reference(cls: type) -> bool:
    """Whether pickle finds ``cls`` again by its module and qualified name."""
    import sys

    obj: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is cls


def ship_nameless_classes(dataset: Any) -> list[str]:
    """Send by value the user's modules holding classes pickle cannot find by name (a namedtuple
    made in a class body), so results come back as the user's very classes, not an actor's copies;
    installed packages are left alone. Returns the modules registered."""
    import sys

    from ray import cloudpickle

    done, seen = [], set()
    while dataset is not None and id(dataset) not in seen:
        seen.add(id(dataset))
        cls = type(dataset)
        module = sys.modules.get(cls.__module__)
        file = getattr(module, "__file__", None) or ""
        if module is not None and cls.__module__ != "__main__" and "site-packages" not in file:
            spaces = (vars(cls), vars(module))
            if any(
                isinstance(v, type) and v.__module__ == cls.__module__ and not _by_reference(v)
                for space in spaces
                for v in list(space.values())
            ):
                cloudpickle.register_pickle_by_value(module)
                done.append(cls.__module__)
        dataset = getattr(dataset, "dataset", None)  # a Subset's, a wrapper's
    return done
