"""Elastic resume end to end, gloo ranks in separate processes: a job of 2 ranks saves mid-epoch
(and at the epoch's end); rank 0's state is broadcast and loaded by every rank of jobs of 1, 2,
3 and 4 ranks (and from 3 back to 2). What was delivered before and after is the epoch, each
sample once plus the documented padding, every rank the same number of batches, and a sample
has the same pixels whichever rank and world size delivered it — for torch's order, the keyed
order and the shard-aware order of both kinds."""

import hashlib
import json
from datetime import timedelta

import pytest

from support.streams import free_port, run_ranks
from test_tarshards import write_shard

PROCS, N, B, EPOCH = 4, 60, 4, 1
SIZES = (9, 7, 8, 6, 9, 7, 8, 6)  # the shard-aware order's shards: uneven, 60 samples


def _deliver(loader, limit=None):
    """[(batch of [index, pixel digest]), ...] for up to ``limit`` batches of a pass."""
    out = []
    for images, _labels, idx in loader:
        out.append([[int(i), hashlib.md5(images[k].numpy().tobytes()).hexdigest()] for k, i in enumerate(idx)])
        if limit is not None and len(out) == limit:
            break
    return out


CASES = [
    {"order": order, "source": source, "boundary": boundary, "saved": 8 if boundary else 2}
    for boundary in (False, True)
    for order in ("randperm", "keyed")
    for source in ("folder", "shards")
]
# saved: batches per rank before the save; 8 = the whole epoch at 2 ranks of batch 4 (30 samples each)


def _worker(rank: int, port: int, root: str, shard_pattern: str, out: str) -> None:
    """One job of 4 gloo processes runs every case (a job of W ranks is the first W processes)."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=PROCS, timeout=timedelta(seconds=120)
    )
    try:
        results = [_case(rank, root, shard_pattern, case) for case in CASES]
        if rank == 0:
            with open(out, "w") as f:
                json.dump(results, f)
    finally:
        dist.destroy_process_group()


def _case(rank: int, root: str, shard_pattern: str, case: dict) -> list:
    import torch.distributed as dist

    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    def make(world, source):
        src = (
            sources.TarShards(shard_pattern, read="shard", buffer_shards=3)
            if source == "shards"
            else sources.ImageFolder(root)
        )
        return HybridLoader(
            src,
            recipe.imagenet_train(32),
            B,
            seed=5,
            order=case["order"],
            rank=rank,
            world_size=world,
            policy=LoaderPolicy(cpu_actors=0, threads=1),
            return_indices=True,
        )

    def share(obj):  # rank 0's object on every rank (a checkpoint written by rank 0, read by all)
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    result = {}
    state = None
    if rank < 2:  # the first job: 2 ranks, stopped after `saved` batches of epoch 1
        with make(2, case["source"]) as ld:
            ld.set_epoch(EPOCH)
            result["before"] = _deliver(ld, case["saved"])
            state = ld.state_dict()
    states = [None] * PROCS
    dist.all_gather_object(states, state)
    result["states"] = states[:2]
    state = share(state)
    for world in (1, 2, 3, 4):
        if rank < world:
            with make(world, case["source"]) as ld:
                ld.load_state_dict(state)
                ld.set_epoch(EPOCH)  # the usual loop: keeps the resumed place
                if world == 3 and not case["boundary"]:  # save again at 3 ranks, go back to 2
                    result["at3"] = _deliver(ld, 1)
                    state3 = ld.state_dict()
                else:
                    result[f"after{world}"] = _deliver(ld)
                    if case["boundary"] and world == 3:  # the next pass is the next epoch, whole
                        result["next3"] = (_deliver(ld), ld.epoch)
        dist.barrier()
    if not case["boundary"]:
        state3 = share(state3 if rank == 0 else None)
        if rank < 2:
            with make(2, case["source"]) as ld:
                ld.load_state_dict(state3)
                ld.set_epoch(EPOCH)
                result["back2"] = _deliver(ld)
    gathered = [None] * PROCS
    dist.all_gather_object(gathered, result)
    return gathered


@pytest.fixture(scope="module")
def shard_pattern(tmp_path_factory, photo_root):
    from hybridload import sources

    folder = sources.ImageFolder(photo_root)
    d = tmp_path_factory.mktemp("elastic_shards")
    start = 0
    for s, size in enumerate(SIZES):
        write_shard(
            d / f"part-{s:02d}.tar",
            [
                m
                for i in range(start, start + size)
                for m in ((f"k{i:03d}.jpg", folder.read(folder.ref(i))[0]), (f"k{i:03d}.cls", str(i % 3).encode()))
            ],
        )
        start += size
    return f"{d}/part-{{00..{len(SIZES) - 1:02d}}}.tar"


def _check_union(parts, pixels):
    """Every sample of the epoch delivered, the extras only padding; the same pixels per index."""
    flat = [pair for part in parts for rank_batches in part for b in rank_batches for pair in b]
    for i, digest in flat:
        assert pixels.setdefault(i, digest) == digest, f"sample {i} has other pixels on another rank or world size"
    return [i for i, _ in flat]


def _ranks(gathered, key, world):
    per_rank = [g[key] for g in gathered[:world]]
    assert len({len(r) for r in per_rank}) == 1, f"{key}: ranks got different numbers of batches"
    return per_rank


@pytest.fixture(scope="module")
def job(photo_root, shard_pattern, tmp_path_factory):
    """Every case's results, from one job of 4 gloo processes (started once: a few seconds each)."""
    out = str(tmp_path_factory.mktemp("elastic") / "ranks.json")
    port = free_port()
    codes = run_ranks(_worker, lambda r: (r, port, photo_root, shard_pattern, out), PROCS, timeout_s=300)
    assert codes == [0] * PROCS
    return json.load(open(out))


@pytest.mark.parametrize(
    "k",
    range(len(CASES)),
    ids=["{}-{}-{}".format("epoch-end" if c["boundary"] else "mid-epoch", c["order"], c["source"]) for c in CASES],
)
def test_a_state_saved_at_two_ranks_resumes_at_one_to_four_ranks_each_sample_once(job, k):
    gathered, boundary, saved = job[k], CASES[k]["boundary"], CASES[k]["saved"]
    s0, s1 = gathered[0]["states"]
    assert {k: v for k, v in s0.items() if k != "rank"} == {k: v for k, v in s1.items() if k != "rank"}  # in step
    assert s0["delivered"] == (N if boundary else saved * B * 2)
    before = _ranks(gathered, "before", 2)
    pixels: dict = {}
    for world in (1, 2, 3, 4) if boundary else (1, 2, 4):
        after = _ranks(gathered, f"after{world}", world)
        seen = _check_union([before, after], pixels)
        left = N - s0["delivered"]
        per = -(-left // world)
        assert sorted(set(seen)) == list(range(N))
        assert len(seen) - N == per * world - left, f"at {world} ranks: more than the documented padding"
        if boundary:
            assert after == [[]] * world  # the epoch was over: nothing more of it
    if boundary:
        nxt = [g["next3"] for g in gathered[:3]]
        assert {e for _, e in nxt} == {EPOCH + 1}
        assert sorted(i for batches, _ in nxt for b in batches for i, _ in b) == list(range(N))  # 60 = 3 x 20
    else:  # 2 ranks -> 3 ranks (1 batch each, saved) -> back to 2 ranks
        seen = _check_union([before, _ranks(gathered, "at3", 3), _ranks(gathered, "back2", 2)], pixels)
        assert sorted(set(seen)) == list(range(N)) and len(seen) - N <= 1 + 2  # at most one short round per job
