"""DDP on one machine with ray_address="embedded": the ranks share one embedded Ray cluster
(the first starts it, the others join it through the job's address file)."""

import os
import tempfile
import textwrap

import pytest

from hybridload.raycluster._node_cluster import job_key

from support.streams import free_port, run_rank_scripts

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize(
    "env, expected",
    [
        (
            {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "abc"},
            "abc|127.0.0.1:29500",
        ),
        ({"LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "8", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "|h:1"),
        ({"LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "8", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, None),  # one rank here
        ({"WORLD_SIZE": "2"}, None),  # no job to key it by
        ({}, None),
    ],
)
def test_job_key_is_shared_by_the_ranks_of_one_job_on_one_machine_only(env, expected):
    assert job_key(env) == expected


RANK = textwrap.dedent("""
    import datetime, json, os
    import ray, torch
    import torch.distributed as dist
    from torch.utils.data import TensorDataset
    import hybridload

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    ld = hybridload.DataLoader(TensorDataset(torch.arange(12)), batch_size=3, distribute_mode=True, num_workers=1,
                               head_address="embedded", persistent_workers=True)
    got = [b[0].tolist() for b in ld]
    mine = sorted(a._ray_actor_id.hex() for a in ld._lanes[0].actors)
    dist.barrier()  # both ranks are connected and hold their actors
    tmp = os.environ["RAY_TMPDIR"]
    def cmdline(pid):
        try:
            return open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\\0")
        except OSError:
            return [""]
    raylets = sum(1 for pid in os.listdir("/proc") if pid.isdigit()
                  for cmd in [cmdline(pid)] if os.path.basename(cmd[0]) == "raylet" and any(tmp in a for a in cmd))
    print(json.dumps({"rank": dist.get_rank(), "gcs": ray.get_runtime_context().gcs_address, "actors": mine,
                      "raylets": raylets, "batches": got}), flush=True)
    dist.barrier()  # the rank that started the cluster stays until the other is done
    ld.close()
    dist.destroy_process_group()
""")


def test_two_ranks_on_one_machine_share_one_embedded_cluster_with_disjoint_actors():
    with tempfile.TemporaryDirectory(prefix="hl", dir="/tmp") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(
            RAY_TMPDIR=tmp,
            TMPDIR=tmp,
            RAY_USAGE_STATS_ENABLED="0",
            PYTHONPATH=HERE,
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
            TORCHELASTIC_RUN_ID="node-cluster-test",
        )
        outs = run_rank_scripts(RANK, [{**env, "RANK": str(r), "LOCAL_RANK": str(r)} for r in range(2)])
    assert outs[0]["gcs"] == outs[1]["gcs"], "each rank started its own Ray cluster"
    assert outs[0]["raylets"] == outs[1]["raylets"] == 1
    assert outs[0]["actors"] and outs[1]["actors"] and not set(outs[0]["actors"]) & set(outs[1]["actors"])
    assert outs[0]["batches"] == outs[1]["batches"] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
