"""One local file written whole or not at all (a temporary file renamed over it, removed on
failure), with the mode ``open(path, "w")`` gives under the umask, since other users read a
dataset's manifests, sidecars and caches while they may be rewritten."""

from __future__ import annotations

import os
import secrets

#: tries at a temporary name before giving up (each a fresh random name)
_NAME_TRIES = 100


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to the local file ``path`` atomically (see the module's docstring); an
    OSError names ``path``, not the temporary file."""
    where = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(where))
    for _ in range(_NAME_TRIES):
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as open()'s
        except FileExistsError:
            continue
        except OSError as exc:
            raise _naming(exc, where) from None
        break
    else:
        raise FileExistsError(f"cannot write {where!r}: no free temporary name beside it")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, where)
    except BaseException as exc:
        try:
            os.remove(tmp)
        except OSError:
            pass  # gone already (renamed, or never made): nothing left to clean
        if isinstance(exc, OSError):
            raise _naming(exc, where) from None
        raise


def _naming(exc: OSError, where: str) -> OSError:
    """``exc`` as the same kind of error about ``where`` (a temporary file's name means nothing to a user)."""
    if exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror, where)
