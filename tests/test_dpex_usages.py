"""Dpex's three README usages, as written (num_workers=10, head_address left at "auto"), on
this 2-core machine: the same batches as torch's DataLoader (distribute_mode=False) with
the same generator; DDP over 2 gloo ranks covers the dataset with equal batch counts."""

import json
import os
import tempfile
import textwrap

from support.streams import free_port, run_rank_scripts

HERE = os.path.dirname(os.path.abspath(__file__))


def _env(tmp: str, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # a private Ray temp dir: no `ray start` record from another test process is in reach
    env.update(RAY_TMPDIR=tmp, RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=HERE, **extra)
    return env


DATASET = textwrap.dedent("""
    import torch
    from torch.utils.data import Dataset

    class Indexed(Dataset):
        def __init__(self, n):
            self.n, self.data = n, torch.arange(n * 5, dtype=torch.float32).reshape(n, 5)

        def __getitem__(self, i):
            return self.data[i]

        def __len__(self):
            return self.n
""")

SINGLE_AND_DATAPARALLEL = DATASET + textwrap.dedent("""
    import json, warnings
    import torch.nn as nn
    import hybridload

    def epochs(**kw):  # two epochs, as Dpex's example loops over epochs
        ld = hybridload.DataLoader(generator=torch.Generator().manual_seed(5), **kw)
        out = [[b.clone() for b in ld] for _ in range(2)]
        if hasattr(ld, "close"):
            ld.close()
        return out

    def same(a, b):
        return len(a) == len(b) and all(len(x) == len(y) and all(torch.equal(p, q) for p, q in zip(x, y))
                                        for x, y in zip(a, b))

    ds = Indexed(1000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # 3.1 single process
        single = epochs(dataset=ds, distribute_mode=True, num_workers=10, batch_size=100, shuffle=True)
        # 3.2 DataParallel
        small = Indexed(30)
        dp = epochs(dataset=small, distribute_mode=True, batch_size=30, shuffle=True, num_workers=10)
    model = nn.DataParallel(nn.Linear(5, 2))
    outputs = [model(b).shape[0] for e in dp for b in e]
    print(json.dumps({
        "single_equal": same(single, epochs(dataset=ds, batch_size=100, shuffle=True)),
        "dp_equal": same(dp, epochs(dataset=small, batch_size=30, shuffle=True)),
        "single_batches": [len(e) for e in single], "dp_outputs": outputs,
        "epochs_differ": not torch.equal(single[0][0], single[1][0]),
        "warnings": sorted({str(w.message)[:40] for w in caught if "workers asked for" in str(w.message)})}))
""")


def test_dpex_single_process_and_dataparallel_usages_give_torchs_batches_with_num_workers_10(zygote):
    with tempfile.TemporaryDirectory(prefix="hl", dir="/tmp") as tmp:
        proc = zygote.run(code=SINGLE_AND_DATAPARALLEL, cwd=os.getcwd(), env=_env(tmp), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["single_equal"] and got["dp_equal"], got
    assert got["single_batches"] == [10, 10] and got["dp_outputs"] == [30, 30] and got["epochs_differ"]
    assert got["warnings"] and all("10 workers asked for" in w for w in got["warnings"])  # said, not refused


DDP_RANK = DATASET + textwrap.dedent("""
    import datetime, json, os
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler
    import hybridload

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    ds = Indexed(250)
    loader = hybridload.DataLoader(ds, distribute_mode=True, batch_size=30, sampler=DistributedSampler(ds),
                                   num_workers=10)
    got = [b.clone() for b in loader]
    loader.close()
    plain = list(DataLoader(ds, batch_size=30, sampler=DistributedSampler(ds)))
    counts = [None, None]
    dist.all_gather_object(counts, len(got))
    print(json.dumps({"rank": dist.get_rank(), "equal": len(got) == len(plain) and all(
        torch.equal(a, b) for a, b in zip(got, plain)), "rows": [int(r[0]) // 5 for b in got for r in b],
        "counts": counts}))
    dist.destroy_process_group()
""")


def test_dpex_ddp_usage_over_two_gloo_ranks_covers_the_dataset_with_equal_batch_counts():
    with tempfile.TemporaryDirectory(prefix="hl", dir="/tmp") as tmp:
        common = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
        outs = run_rank_scripts(DDP_RANK, [_env(tmp, RANK=str(r), LOCAL_RANK=str(r), **common) for r in range(2)])
    assert all(o["equal"] for o in outs), "a rank's batches differ from torch's DataLoader with the same sampler"
    assert outs[0]["counts"] == outs[1]["counts"] == [5, 5]  # 250 samples, 125 per rank, batches of 30
    rows = outs[0]["rows"] + outs[1]["rows"]
    assert sorted(set(rows)) == list(range(250)) and not set(outs[0]["rows"]) & set(outs[1]["rows"])
