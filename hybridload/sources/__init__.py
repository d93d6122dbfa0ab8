"""Sources describe samples without reading them.

A source has ``len()``, ``ref(i)`` (a small picklable `SampleRef`) and
``read(ref)``, which returns the encoded bytes (or an already decoded image) and is
called by whoever processes the sample, on the node where it runs.

Modules: ``_base`` (the Source base class, refs, reading local paths and fsspec URLs),
``_filelist`` (FileList), ``_folder`` (ImageFolder), the ``_tar`` sub-package (TarShards, with its
manifest, shard list, member index, sidecar, read checks, member tables, shard cache and
brace patterns), ``_torch_dataset``
(TorchDataset), ``_mix`` (Mix: several sources by weight, in exact per-epoch quotas), ``_weighted`` (Weighted:
per-sample weights, WeightedRandomSampler's draws), ``_read_retry`` (retrying a read the storage failed), ``_reads`` (a batch's reads in flight at once on an I/O thread pool). A new
source subclasses `Source` in its own module and is re-exported here.
"""

from hybridload.sources._base import SampleRef, Source, is_url, read_bytes, read_error, url_to_fs
from hybridload.sources._read_retry import ReadRetry
from hybridload.sources._filelist import FileList
from hybridload.sources._folder import IMG_EXTENSIONS, ImageFolder
from hybridload.sources._tar import TarShards, braceexpand, expand_urls
from hybridload.sources._torch_dataset import TorchDataset
from hybridload.sources._mix import Mix
from hybridload.sources._weighted import Weighted

__all__ = [
    "SampleRef",
    "Source",
    "FileList",
    "ImageFolder",
    "TarShards",
    "TorchDataset",
    "Mix",
    "Weighted",
    "IMG_EXTENSIONS",
    "ReadRetry",
    "is_url",
    "read_bytes",
    "read_error",
    "url_to_fs",
    "braceexpand",
    "expand_urls",
]
