"""The PyTorch DDP tutorial's pattern on the drop-in with Ray actors: ranks started by
``torch.multiprocessing.spawn`` (their main module is ``__mp_main__``), the Dataset and
collate_fn defined in the training script, and a Dataset from a module in a folder the script
put on ``sys.path`` — the actors get the code by value (issue 29); the same datasets on the
local lane with worker processes started by ``forkserver`` and ``spawn``. Real parts: a script file run
as ``python train.py`` with a deadline (in the session's zygote: the ranks ``mp.spawn`` starts, and
the workers, are fresh interpreters), 2 gloo ranks, each rank's Ray cluster. Both datasets travel in one
``ConcatDataset`` per loader (its pickle holds both classes, so each must reach the actor or worker):
one pass starts the loader's actors or worker processes, the time of such a case."""

import json
import os
import socket
import textwrap
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]

EXT_MODULE = """
import torch
from torch.utils.data import Dataset

class ExtDataset(Dataset):
    def __len__(self):
        return 10
    def __getitem__(self, i):
        return torch.tensor([100 + i])
"""

SCRIPT = """
import json, os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.utils.data import ConcatDataset, Dataset, DistributedSampler
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "extdir"))
from extmod import ExtDataset
import hybridload

class MyDataset(Dataset):
    def __len__(self):
        return 12
    def __getitem__(self, i):
        return torch.tensor([i])

def my_collate(batch):
    return torch.cat(batch)

def epochs(ds, n, rank, world, context=None):
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0)
    if context is None:  # Ray actors
        loader = hybridload.DataLoader(ds, batch_size=2, sampler=sampler, collate_fn=my_collate,
                                       num_workers=1, distribute_mode=True)
    else:  # the local lane: worker processes started by forkserver or spawn
        loader = hybridload.DataLoader(ds, batch_size=2, sampler=sampler, collate_fn=my_collate,
                                       num_workers=1, multiprocessing_context=context)
    seen = []
    for epoch in range(n):
        sampler.set_epoch(epoch)
        seen.append([int(x) for b in loader for x in b])
    loader.close()
    return seen

def run(rank, world, port, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    both = ConcatDataset([MyDataset(), ExtDataset()])  # the script's dataset and the sys.path folder's
    seen = {"ray": epochs(both, 2, rank, world)}
    for context in ("forkserver", "spawn"):
        seen[context] = epochs(both, 1, rank, world, context)
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(seen, f)
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(2, int(sys.argv[1]), sys.argv[2]), nprocs=2, join=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_spawned_ranks_ship_script_and_sys_path_datasets_to_actors(tmp_path, zygote):
    (tmp_path / "extdir").mkdir()
    (tmp_path / "extdir" / "extmod.py").write_text(EXT_MODULE)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = zygote.run(script, args=(str(_free_port()), str(tmp_path)), cwd=ROOT, env=env, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    both = list(range(12)) + [100 + i for i in range(10)]  # MyDataset's samples, then ExtDataset's
    for epoch in range(2):  # every sample of both datasets once per epoch across the ranks
        assert sorted(ranks[0]["ray"][epoch] + ranks[1]["ray"][epoch]) == both, epoch
    for context in ("forkserver", "spawn"):  # the local lane's worker processes, started both ways
        assert sorted(ranks[0][context][0] + ranks[1][context][0]) == both, context
