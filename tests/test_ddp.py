"""Two processes with torch.distributed (gloo) each iterate a HybridLoader; the gathered
indices cover the dataset exactly once per epoch (drop_last=False pads only to even out)."""

import json
from datetime import timedelta

import pytest

from support.streams import free_port, run_ranks

WORLD = 2
EPOCHS = 2


def _worker(rank: int, port: int, root: str, out: str, drop_last: bool) -> None:
    import torch.distributed as dist

    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD, timeout=timedelta(seconds=60)
    )
    try:
        loader = HybridLoader(
            sources.ImageFolder(root),
            recipe.imagenet_train(32),
            7,
            policy=LoaderPolicy(cpu_actors=0, threads=1),
            seed=11,
            drop_last=drop_last,
            return_indices=True,
        )  # rank and world size from torch.distributed
        result = {"rank": loader.rank, "world": loader.world_size, "epochs": []}
        for epoch in range(EPOCHS):
            loader.set_epoch(epoch)
            mine = [idx.tolist() for _img, _lab, idx in loader]
            gathered = [None] * WORLD
            dist.all_gather_object(gathered, mine)
            result["epochs"].append(gathered)
        loader.close()
        if rank == 0:
            with open(out, "w") as f:
                json.dump(result, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("drop_last", [False, True])
def test_two_gloo_ranks_cover_the_dataset_once_per_epoch(photo_root, tmp_path, drop_last):
    out = str(tmp_path / "ranks.json")
    port = free_port()
    codes = run_ranks(_worker, lambda r: (r, port, photo_root, out, drop_last), WORLD, timeout_s=180)
    assert codes == [0] * WORLD
    result = json.load(open(out))
    assert result["world"] == WORLD
    n = 60
    orders = []
    for gathered in result["epochs"]:
        assert len(gathered[0]) == len(gathered[1]), "ranks must get the same number of batches"
        flat = [i for rank_batches in gathered for b in rank_batches for i in b]
        if drop_last:
            assert len(set(flat)) == len(flat)  # disjoint
            assert len(flat) == (n // WORLD) // 7 * 7 * WORLD
        else:
            assert sorted(flat) == list(range(n))  # 60 divides evenly: exactly once
        orders.append(flat)
    assert orders[0] != orders[1], "set_epoch must change the order"


def _eval_worker(rank: int, world: int, port: int, root: str, out: str) -> None:
    """The guide's DDP evaluation loop: a DDP model in eval mode, no collective per step, the
    metric summed once after the loop; ranks with fewer batches must not hang the others."""
    import os

    import torch
    import torch.distributed as dist

    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    try:
        paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg"))[:55]
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 2))
        with HybridLoader(
            sources.FileList(paths, [i % 3 for i in range(55)]),
            recipe.imagenet_train(16),
            3,
            policy=LoaderPolicy(cpu_actors=0, threads=1),
            shuffle=False,
            even_batches=False,
            return_indices=True,
            device="cpu",
        ) as loader:
            model.eval()
            seen, count = [], torch.zeros(1)
            with torch.no_grad():
                for images, _labels, idx in loader:
                    model(images.float().mean(dim=(2, 3)))
                    count += len(idx)
                    seen.append(idx.tolist())
            dist.all_reduce(count)  # once, after the loop: every rank reaches it
            gathered = [None] * world
            dist.all_gather_object(gathered, {"batches": len(seen), "len": len(loader), "seen": seen})
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"count": int(count.item()), "ranks": gathered}, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_evaluation_with_even_batches_false_counts_each_sample_once_at_uneven_batch_counts(photo_root, tmp_path, world):
    out = str(tmp_path / "eval.json")
    port = free_port()
    codes = run_ranks(_eval_worker, lambda r: (r, world, port, photo_root, out), world, timeout_s=240)
    assert codes == [0] * world, "a rank failed or hung at the uneven last step"
    result = json.load(open(out))
    flat = [i for r in result["ranks"] for b in r["seen"] for i in b]
    assert sorted(flat) == list(range(55)) and result["count"] == 55  # each sample exactly once
    counts = [r["batches"] for r in result["ranks"]]
    assert len(set(counts)) > 1, f"55 samples in batches of 3 give the ranks uneven batch counts, got {counts}"
    assert counts == [r["len"] for r in result["ranks"]]  # len(loader) is this rank's own count
