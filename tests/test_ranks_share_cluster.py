"""Ranks of one torchrun job on one machine share the embedded Ray cluster, on a machine with
an address besides loopback (issue 29). Before, Ray rewrote the loopback address rank 0
recorded to the machine's outward one, where the loopback-only cluster does not listen:
rank 1's join retried for many minutes and torchrun never ended. The job runs in a network
namespace of its own whose only addresses are 127.0.0.1 and 192.0.2.77 (as a real host's
outward address), so every packet stays inside it. Real parts: torchrun, 2 gloo ranks, the
drop-in with Ray actors, Ray's embedded cluster, and a Lightning ``Trainer(strategy="ddp",
devices=2)`` (its ranks are the script run again by Lightning). Asserts every sample once per
epoch across the ranks, both ranks on one cluster, each on loopback."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.jobs import run_job
from support.streams import free_port

ROOT = Path(__file__).resolve().parents[1]
OUTWARD = "192.0.2.77"
SAMPLES, EPOCHS = 24, 2

SCRIPT = """
import json, os, socket, sys
import ray, torch, torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler
import hybridload

class Numbers(Dataset):
    def __len__(self):
        return %(samples)d
    def __getitem__(self, i):
        return torch.tensor([i])

def outward():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("198.51.100.1", 9))  # no packet is sent: the route's source address
        return s.getsockname()[0]

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ds = Numbers()
sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0)
loader = hybridload.DataLoader(ds, batch_size=3, sampler=sampler, num_workers=1, distribute_mode=True)
seen = []
for epoch in range(%(epochs)d):
    sampler.set_epoch(epoch)
    seen.append([int(x) for b in loader for x in b.flatten()])
node = ray._private.worker.global_worker.node
record = {"seen": seen, "gcs": ray.get_runtime_context().gcs_address, "node_ip": node.node_ip_address,
          "outward": outward()}
loader.close()
with open(os.path.join(sys.argv[1], "rank%%d.json" %% rank), "w") as f:
    json.dump(record, f)
dist.barrier()
dist.destroy_process_group()
""" % {"samples": SAMPLES, "epochs": EPOCHS}

LIGHTNING_SCRIPT = """
import json, os, sys
import ray, torch
import lightning as L
from torch.utils.data import Dataset
import hybridload

class Numbers(Dataset):
    def __len__(self):
        return %(samples)d
    def __getitem__(self, i):
        return torch.tensor([float(i)])

class Model(L.LightningModule):
    def __init__(self, out):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.out = out
        self.seen = [[] for _ in range(%(epochs)d)]
    def training_step(self, batch, batch_idx):
        self.seen[self.current_epoch] += [int(x) for x in batch.flatten()]
        return self.layer(batch).sum()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
    def train_dataloader(self):
        return hybridload.DataLoader(Numbers(), batch_size=2, shuffle=True, num_workers=1, distribute_mode=True)
    def on_train_end(self):
        record = {"seen": self.seen, "gcs": ray.get_runtime_context().gcs_address,
                  "node_ip": ray._private.worker.global_worker.node.node_ip_address}
        with open(os.path.join(self.out, "rank%%d.json" %% self.global_rank), "w") as f:
            json.dump(record, f)

if __name__ == "__main__":
    trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_epochs=%(epochs)d, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Model(sys.argv[1]))
""" % {"samples": SAMPLES, "epochs": EPOCHS}

#: the namespace's own resolver file, empty: no DNS server, so a name lookup fails at once, as a
#: host's own DNS would answer at once (the machine's nameserver, unreachable from the namespace,
#: made each of gloo's lookups of the outward address wait out its timeout: 10 s of each job)
NETNS = (
    "mount --bind {resolv} /etc/resolv.conf && ip link set lo up && ip addr add {ip}/32 dev lo"
    ' && ip route add default dev lo src {ip} && exec "$@"'
)


def _namespace_or_skip():
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip (util-linux, iproute2) for a network namespace of the test's own")
    probe = subprocess.run(["unshare", "-n", "-m", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here (root needed): {probe.stderr.strip()}")


def _run_in_own_namespace(argv, tmp_path, what, deadline_s=200):
    """Run ``argv`` in a new network and mount namespace (loopback and OUTWARD only, no DNS server)
    under a deadline; the output, after asserting exit status 0. On the deadline the whole process
    group goes."""
    _namespace_or_skip()
    # a user's environment: no cluster named, and not the test suite's RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0,
    # which makes Ray take 127.0.0.1 for this machine's address and hid the rewrite to the outward one
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    env.update(PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("")
    return run_job(
        ["unshare", "-n", "-m", "bash", "-c", NETNS.format(ip=OUTWARD, resolv=resolv), "netns", *argv],
        cwd=tmp_path,
        env=env,
        what=what,
        deadline_s=deadline_s,
    )


def _assert_every_sample_once_on_one_loopback_cluster(ranks):
    for epoch in range(EPOCHS):  # every sample once per epoch across the ranks
        assert sorted(ranks[0]["seen"][epoch] + ranks[1]["seen"][epoch]) == list(range(SAMPLES)), epoch
    assert ranks[0]["gcs"] == ranks[1]["gcs"] and ranks[0]["gcs"].startswith("127.0.0.1:")  # one cluster
    assert [r["node_ip"] for r in ranks] == ["127.0.0.1", "127.0.0.1"]  # each rank's Ray on loopback


@pytest.mark.timeout(240)
def test_torchrun_ranks_share_the_embedded_cluster_on_loopback_and_see_every_sample_once(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    _run_in_own_namespace(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(free_port()),
            str(script),
            str(tmp_path),
        ],
        tmp_path,
        "torchrun with 2 ranks on the embedded cluster",
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["outward"] == OUTWARD  # the machine had an address besides loopback, as a real host
    _assert_every_sample_once_on_one_loopback_cluster(ranks)


@pytest.mark.timeout(240)
def test_lightning_ddp_ranks_share_the_embedded_cluster_and_see_every_sample_once(tmp_path):
    pytest.importorskip("lightning")
    script = tmp_path / "train_pl.py"
    script.write_text(textwrap.dedent(LIGHTNING_SCRIPT))
    out = _run_in_own_namespace(
        [sys.executable, str(script), str(tmp_path)], tmp_path, "Lightning's ddp with 2 ranks on the embedded cluster"
    )
    assert "no free CPU" not in out  # each epoch on actors: the last pass's actors went with its last batch
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    _assert_every_sample_once_on_one_loopback_cluster(ranks)
