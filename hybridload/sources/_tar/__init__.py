"""`TarShards`: tar shards in the WebDataset layout, read by random access through a member index.

Modules: ``tarshards`` (the source), ``tar_options`` (its arguments checked), ``shard_scan`` (a
pattern's or list's shards counted by one scan each), ``manifest`` (shard manifests),
``shard_list`` (the shards and counts the trainer holds), ``tar_index`` (a shard's member index:
sidecar, cache file or scan), ``sidecar`` (the index file next to a shard, used only while the
shard's size, stamp and end hold), ``shard_checks`` (each read checked against its tar header),
``member_table`` (the checks and digest a stored member table passes at first touch),
``shard_members`` (the per-process tables of the shards a worker touched), ``shard_cache``
(whole shards kept for shard streaming), ``braces`` (WebDataset's ``{000..009}`` patterns),
``shard_names`` (which shard a name means, whatever its spelling; local globs) and
``atomic_write`` (a manifest, sidecar or cache file written whole, with the umask's mode).
"""

from hybridload.sources._tar.braces import braceexpand, expand_urls
from hybridload.sources._tar.tarshards import TarShards

__all__ = ["TarShards", "braceexpand", "expand_urls"]
