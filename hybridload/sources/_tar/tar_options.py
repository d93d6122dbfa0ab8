"""`TarShards`'s arguments checked at construction: the read mode, the shard cache and the image
extensions (`IMAGE_EXTS` by default), each refusal naming the argument and what to write."""

from __future__ import annotations

from typing import Callable, Sequence

from hybridload.sampling._shard_order import ShardOrder

IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")


def check_options(
    read: str,
    buffer_shards: int,
    cache_shards: int | None,
    image_exts: str | Sequence[str],
    label: Callable[[str], int] | None,
) -> tuple[str, ...]:
    """Refuse a bad argument of `TarShards`; return the image extensions, lower-case, without dots."""
    if read not in ("sample", "shard"):
        raise ValueError(
            f"TarShards: read must be 'sample' (a ranged read per sample) or 'shard' "
            f"(whole shards, shard-aware order), got {read!r}"
        )
    if cache_shards is not None and (
        isinstance(cache_shards, bool) or not isinstance(cache_shards, int) or cache_shards < 1
    ):
        raise ValueError(
            f"TarShards: cache_shards must be None or an int >= 1, got {cache_shards!r}; "
            f"write e.g. cache_shards={2 * buffer_shards + 2}"
        )
    ShardOrder((), buffer_shards)  # validates buffer_shards
    if isinstance(image_exts, str):
        image_exts = (image_exts,)
    exts = tuple(e.lower().lstrip(".") for e in image_exts)
    if not exts:
        raise ValueError("TarShards: image_exts is empty; give the extensions of the image members")
    if label is not None and not callable(label):
        raise TypeError(f"TarShards: label must be a function key -> int, got {type(label).__name__}")
    return exts
