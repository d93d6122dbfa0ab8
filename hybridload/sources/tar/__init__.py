"""`TarShards`: tar shards in the WebDataset layout, read by random access through a member index.

Modules: ``tarshards`` (the source), ``tar_options`` (its arguments checked), ``shard_scan`` (a
pattern's or list's shards counted by one scan each), ``manifest`` (shard manifests),
``shard_list`` (the shards and counts the trainer holds), ``tar_index`` (a shard's member index:
sidecar, cache file or scan), ``sidecar`` (the index file next to a shard, used only while the
shard's size, stamp and end hold), ``shard_checks`` (each read checked against its tar header),
``shard_members`` (the per-process tables of the shards a worker touched), ``shard_cache``
(whole shards kept for shard streaming) and ``braces`` (WebDataset's ``{000..009}`` patterns).
"""

from hybridload.sources.tar.braces import braceexpand, expand_urls
from hybridload.sources.tar.tarshards import TarShards

__all__ = ["TarShards", "braceexpand", "expand_urls"]
