"""A loader over plain pictures for the lanes' batch-buffer tests, and a thread's page faults."""

import numpy as np

from hybridload import recipe, sources


class Pictures:
    """Map-style dataset of 96 pictures, 256 x 256, each one value (the eval recipe keeps 224)."""

    def __len__(self):
        return 96

    def __getitem__(self, i):
        return np.full((256, 256, 3), i % 251, np.uint8), i


def picture_loader(batch_size: int, local_workers: str = "threads", **kw):
    """A one-worker CPU loader (thread or process, ``local_workers``) over `Pictures`, seed 3."""
    from hybridload import HybridLoader, LoaderPolicy

    return HybridLoader(
        sources.TorchDataset(Pictures()),
        recipe.imagenet_eval(224),
        batch_size,
        shuffle=True,
        device="cpu",
        seed=3,
        policy=LoaderPolicy(mode="cpu", cpu_actors=0, threads=1, local_workers=local_workers),
        **kw,
    )


def minor_faults(native_id: int) -> int:
    """The minor page faults of this process's thread ``native_id`` so far (Linux ``/proc``)."""
    with open(f"/proc/self/task/{native_id}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def kept_buffer_pages(loader) -> int:
    """Pages of the batch buffers ``loader``'s lanes keep so far: a pass whose consumer falls behind
    may keep one more (up to the lane's bound), whose first write faults its pages in once."""
    pools = (getattr(lane, "_buffers", None) for lane in loader._lanes)
    return sum(pool.kept_bytes() for pool in pools if pool is not None) // 4096
