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
