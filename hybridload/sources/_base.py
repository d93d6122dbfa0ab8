"""What every source shares: sample refs, the `Source` base class, and reading a location (a local
path, or an fsspec URL through a filesystem each process gets for itself on first read, so none
travels in a pickle): docs/guide/sources.md."""

from __future__ import annotations

import numbers
import os
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from hybridload.errors import LabelError, SampleError, StorageError

from hybridload.sources._read_retry import DEFAULT_READ_RETRY, ReadRetry, ReadsExhausted, with_retries
from hybridload.sources._reads import sequential_reads


@dataclass(frozen=True)
class SampleRef:
    """Where one sample lives: its dataset index, a location and its label.

    Attributes:
        index: the sample's index in the source.
        location: a path, URL or ``"<shard>#<member>"``, named in errors.
        label: the integer label (-1 where the source has none).
    """

    index: int
    location: str
    label: int


class Source:
    """Base class: subclasses implement ``__len__``, ``ref`` and ``read``; they may override
    ``read_many`` (a batch's reads, e.g. concurrently) and ``sample_order`` (their own epoch order).

    ``read_retry`` (a `ReadRetry`) says how the library's sources retry a read that
    failed for a reason other than the sample's (see `read_failure`)."""

    read_retry: ReadRetry = DEFAULT_READ_RETRY

    def __len__(self) -> int:
        raise NotImplementedError

    def ref(self, index: int) -> SampleRef:
        raise NotImplementedError

    def read(self, ref: SampleRef) -> tuple[Any, int]:
        """Return ``(payload, label)``: the encoded bytes or a decoded image (PIL image,
        HWC uint8 array, CHW uint8 tensor), and the sample's label."""
        raise NotImplementedError

    def read_many(self, refs: Sequence[SampleRef]) -> Iterator[Any]:
        """The reads of ``refs``, in order, as ``(payload, label)`` or the `SampleError`
        a read raised. The base reads one after another when asked; sources on remote
        storage override it to read concurrently (see `hybridload.sources._reads`)."""
        return sequential_reads(self.read, refs)

    def sample_order(self) -> Any:
        """The rule that orders an epoch's samples and splits them among ranks: None for the
        library's default (DistributedSampler's), or an object with a pure
        ``rank_indices(n, *, seed, epoch, world_size, rank, shuffle, drop_last)``, such as
        `hybridload.sampling._shard_order.ShardOrder` for shard streaming."""
        return None

    def fingerprint(self) -> str | None:
        """What a saved loader state records of the dataset beyond its size, and a resume must
        find again (`ResumeMismatchError`, naming what differs, otherwise): ``"Kind; part:
        value; ..."``; the base gives its class and size (each source's: the sources page,
        "Resuming over another dataset"). A subclass whose samples differ from another's of the
        same class and size says so here."""
        return f"{type(self).__name__}; samples: {len(self)}"

    def _check_index(self, index: int) -> int:
        n = len(self)
        if not 0 <= index < n:
            raise IndexError(f"{type(self).__name__}: index {index} out of range for {n} samples")
        return int(index)


_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*(://|::)")


def is_url(location: str) -> bool:
    """True for an fsspec URL (``scheme://...`` or a chained ``a::b://...``), False for a
    plain local path, which keeps the fast ``open()`` path.

    Args:
        location: a path or URL."""
    return bool(_URL_RE.match(location))


def url_to_fs(url: str, storage_options: Mapping[str, Any] | None = None):
    """``(filesystem, path)`` for an fsspec URL; fsspec caches filesystem instances per
    process, so this is cheap after the first call in a process.

    Args:
        url: an fsspec URL.
        storage_options: options for its filesystem."""
    try:
        import fsspec.core
    except ImportError as exc:  # pragma: no cover - fsspec is a dependency
        raise ImportError(f"reading {url!r} needs fsspec: pip install fsspec") from exc
    try:
        return fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as exc:  # e.g. s3:// without s3fs installed
        raise ImportError(f"cannot open {url!r} through fsspec: {exc}") from exc
    except ValueError as exc:  # e.g. an unknown protocol
        raise ValueError(f"cannot open {url!r} through fsspec: {exc}") from exc


def read_bytes(
    location: str, storage_options: Mapping[str, Any] | None = None, *, offset: int = 0, size: int | None = None
) -> bytes:
    """Read a file (or ``size`` bytes of it from ``offset``): local paths with ``open``,
    URLs through fsspec. Raises whatever the filesystem raises.

    Args:
        location: a local path or an fsspec URL.
        storage_options: fsspec options for a URL.
        offset: the first byte to read.
        size: how many bytes; None: to the end."""
    if not is_url(location):
        with open(location, "rb") as f:
            if offset:
                f.seek(offset)
            return f.read() if size is None else f.read(size)
    fs, path = url_to_fs(location, storage_options)
    if offset == 0 and size is None:
        return fs.cat_file(path)
    return fs.cat_file(path, start=offset, end=None if size is None else offset + size)


def check_protocols(locations: Sequence[str], storage_options: Mapping[str, Any] | None) -> None:
    """Fail at construction, not at every sample, on a URL whose protocol fsspec does not
    know or whose backend (s3fs, gcsfs, ...) is not installed."""
    seen = set()
    for loc in locations:
        if is_url(loc):
            proto = loc.split("://", 1)[0]
            if proto not in seen:
                seen.add(proto)
                url_to_fs(loc, storage_options)


def read_error(exc: BaseException) -> str:
    """A short reason for a failed read (``"FileNotFoundError: No such file or directory"``)
    that leaves out the path: the `SampleError` carrying it names the sample.

    Args:
        exc: the read's exception."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return f"{type(exc).__name__}: {exc}"


def read_failure(ref: SampleRef, exc: BaseException, storage_options: Mapping[str, Any] | None = None) -> SampleError:
    """The error naming the sample for a failed read: a `StorageError` when every
    retry failed (`ReadsExhausted`; never skipped) or the file's directory is gone or
    unreadable too (`directory_gone`: an outage, never skipped), else a `SampleError`
    (stage ``"read"``: a missing or unreadable file, bad data).

    Args:
        ref: the sample read.
        exc: what the read raised.
        storage_options: fsspec options, to look at a URL's "directory" (its prefix)."""
    if isinstance(exc, ReadsExhausted):
        return StorageError(ref.index, ref.location, read_error(exc.cause), exc.attempts, exc.seconds)
    gone = directory_gone(ref.location, storage_options) if isinstance(exc, OSError) else ""
    if gone:
        return StorageError(ref.index, ref.location, f"{read_error(exc)}; {gone}", 1, 0.0)
    return SampleError(ref.index, ref.location, "read", read_error(exc))


def directory_gone(location: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """Why a file's failed read is the storage's rather than the file's: its directory is gone
    (moved, deleted, a mount gone; for a URL, nothing left under its prefix) or cannot be
    listed; ``""`` when the directory is there (then the file alone is missing or unreadable:
    one bad file, which ``on_error="skip"`` may skip). Called on failed reads only.

    Args:
        location: the file's path or URL.
        storage_options: fsspec options for a URL."""
    if is_url(location):
        return _prefix_gone(location, storage_options)
    d = os.path.dirname(os.path.abspath(location))
    try:
        with os.scandir(d) as entries:
            next(entries, None)
    except FileNotFoundError:
        return (
            f"its directory {d} is gone too (moved, deleted or unmounted): a storage outage, not one bad file, "
            "so it is not skipped"
        )
    except OSError as exc:
        return (
            f"its directory {d} cannot be listed ({exc.strerror}): a storage outage or a permission change, "
            "not one bad file, so it is not skipped"
        )
    return ""


def _prefix_gone(url: str, storage_options: Mapping[str, Any] | None) -> str:
    """`directory_gone` for a URL: its parent prefix lists nothing (fresh, not cached)."""
    head, _, _ = url.rpartition("/")
    if "://" not in head or head.endswith(":/"):  # a file at the filesystem's root: nothing to look at
        return ""
    try:
        fs, path = url_to_fs(head, storage_options)
        fs.invalidate_cache(path)
        left = fs.ls(path, detail=False)
    except FileNotFoundError:
        left = []
    except Exception:  # any filesystem's error: cannot tell, so the file's own failure stands
        return ""
    return (
        ""
        if left
        else (
            f"nothing is left under {head}/ either (deleted or moved): a storage outage, not one "
            "bad file, so it is not skipped"
        )
    )


def read_file(
    ref: SampleRef, storage_options: Mapping[str, Any] | None = None, retry: ReadRetry = DEFAULT_READ_RETRY
) -> bytes:
    """The whole file at ``ref.location``, retried per ``retry`` when the storage fails;
    any read failure becomes the `read_failure` naming the sample."""
    try:
        return with_retries(lambda: read_bytes(ref.location, storage_options), retry, ref.location)
    except Exception as exc:  # any filesystem's error (OSError, a cloud client's): name the sample
        raise read_failure(ref, exc, storage_options) from None


def to_label(value: Any, index: int, location: str) -> int:
    """A label as an int class index: Python and numpy ints, one-element integer arrays or
    tensors. Anything else (a string, a float, a one-hot vector) raises `LabelError`
    naming the sample, also under ``on_error="skip"``."""
    v = value
    if hasattr(v, "dtype") and hasattr(v, "shape"):  # numpy array / torch tensor
        kind = str(v.dtype)
        if tuple(v.shape) not in ((), (1,)) or not ("int" in kind or kind.endswith("uint8")):
            raise LabelError(
                f"sample {index} ({location})",
                f"label must be an integer class index, got a {type(v).__name__} of dtype {kind} "
                f"and shape {tuple(v.shape)}; return e.g. int(one_hot.argmax())",
            )
        v = v.reshape(()).item() if hasattr(v, "reshape") else v.item()
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise LabelError(
            f"sample {index} ({location})",
            f"label must be an integer class index, got {v!r} ({type(v).__name__}); map class "
            "names to indices (e.g. class_to_idx[name]) and return an int",
        )
    return int(v)
