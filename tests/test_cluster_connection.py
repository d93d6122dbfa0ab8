"""hybridload.cluster: what head_address/ray_address "auto" joins, and one Ray connection
per process shared by every loader."""

import json
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

from hybridload.cluster import StartRecord, auto_address

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("env, record, uid, expected", [
    ("10.0.0.1:6379", StartRecord("127.0.0.1:6379", 0, "f"), 0, "10.0.0.1:6379"),   # RAY_ADDRESS wins
    (None, StartRecord("127.0.0.1:6379", 0, "f"), 0, "127.0.0.1:6379"),             # this user's ray start
    (None, StartRecord("127.0.0.1:6379", 1234, "f"), 0, None),                      # another user's
    (None, None, 0, None),                                                          # nothing started
    ("", None, 0, None),
])
def test_auto_joins_ray_address_or_this_users_ray_start_record_only(env, record, uid, expected):
    assert auto_address(env, record, uid) == expected


def _env(tmp: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # no token: nothing but the rule below keeps another process's cluster out of reach
    env.update(RAY_TMPDIR=tmp, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", PYTHONPATH=os.pathsep.join(
        p for p in (HERE, env.get("PYTHONPATH")) if p))
    return env


OTHER_PROCESS = textwrap.dedent("""
    import sys, ray
    ray.init(include_dashboard=False, num_cpus=1, object_store_memory=80 * 2**20, log_to_driver=False)
    print(ray.get_runtime_context().gcs_address, flush=True)
    sys.stdin.read()  # until the test closes our stdin
    ray.shutdown()
""")

DROP_IN = textwrap.dedent("""
    import json, logging, ray, torch, hybridload
    from torch.utils.data import TensorDataset
    logging.basicConfig(level=logging.WARNING)
    with hybridload.DataLoader(TensorDataset(torch.arange(8)), batch_size=4, distribute_mode=True,
                               num_workers=1) as ld:  # head_address="auto", the default
        got = [b[0].tolist() for b in ld]
    print(json.dumps({"gcs": ray.get_runtime_context().gcs_address, "batches": got,
                      "nodes": [n["NodeManagerAddress"] for n in ray.nodes()]}))
""")


def test_auto_does_not_attach_to_a_cluster_another_process_started_with_ray_init():
    """Another process's ray.init() cluster is never joined, neither found by scanning nor
    named by a stale `ray start` record: the drop-in falls back to its own loopback cluster."""
    with tempfile.TemporaryDirectory(prefix="hl", dir="/tmp") as tmp:
        env = _env(tmp)
        other = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=env)
        try:
            theirs = other.stdout.readline().strip()
            assert ":" in theirs, "the other process did not start its cluster"
            for stale_record in (False, True):
                if stale_record:  # a record pointing at the ray.init() cluster (not made by `ray start`)
                    os.makedirs(os.path.join(tmp, "ray"), exist_ok=True)
                    with open(os.path.join(tmp, "ray", "ray_current_cluster"), "w") as f:
                        f.write(theirs)
                proc = subprocess.run([sys.executable, "-c", DROP_IN], capture_output=True, text=True, env=env,
                                      timeout=300)
                assert proc.returncode == 0, proc.stderr[-3000:]
                mine = json.loads(proc.stdout.strip().splitlines()[-1])
                assert mine["gcs"] != theirs, "the drop-in attached to another process's cluster"
                assert mine["nodes"] == ["127.0.0.1"] and mine["batches"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
                if stale_record:
                    assert "started by ray.init() in another process" in proc.stderr
        finally:
            other.stdin.close()
            try:
                other.wait(timeout=60)
            except subprocess.TimeoutExpired:
                other.kill()
                other.wait(timeout=30)


CYCLES = textwrap.dedent("""
    import gc, json, os, ray, torch, hybridload
    from torch.utils.data import TensorDataset
    def rss_mb():
        return next(int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmRSS:"))
    out = []
    for k in range(20):
        with hybridload.DataLoader(TensorDataset(torch.arange(8)), batch_size=4, distribute_mode=True,
                                   num_workers=1, head_address="embedded") as ld:
            assert [b[0].tolist() for b in ld] == [[0, 1, 2, 3], [4, 5, 6, 7]]
        gc.collect()
        out.append((len(os.listdir("/proc/self/fd")), rss_mb(), ray.get_runtime_context().get_job_id()))
    from hybridload import cluster
    print(json.dumps({"cycles": out, "users": cluster.users(), "shut": cluster.shutdown(),
                      "after": ray.is_initialized()}))
""")

# Stated bounds (measured: 35 fds after every cycle, RSS +1.7 MiB from cycle 1 to 20; one
# ray.init per loader used to take fds 6 -> 50 and RSS 225 -> 359 MB over 20 cycles).
FD_GROWTH, RSS_GROWTH_MB = 2, 16


def test_twenty_create_close_cycles_share_one_ray_connection_and_leak_no_fds_or_memory():
    with tempfile.TemporaryDirectory(prefix="hl", dir="/tmp") as tmp:
        proc = subprocess.run([sys.executable, "-c", CYCLES], capture_output=True, text=True, env=_env(tmp),
                              timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    cycles = got["cycles"]
    assert len({job for _, _, job in cycles}) == 1, "a loader made its own Ray connection"
    assert cycles[-1][0] - cycles[0][0] <= FD_GROWTH, cycles
    assert cycles[-1][1] - cycles[0][1] < RSS_GROWTH_MB, cycles
    assert got["users"] == 0 and got["shut"] is True and got["after"] is False  # shutdown() when idle
