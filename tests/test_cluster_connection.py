"""hybridload.raycluster._connect: what head_address/ray_address "auto" joins, and one Ray connection
per process shared by every loader."""

import json
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

from hybridload.raycluster._ray_start import (
    StartRecord,
    auto_address,
    gcs_started_by_another_process,
    is_ray_start_command,
)

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize(
    "env, record, uid, expected",
    [
        ("10.0.0.1:6379", StartRecord("127.0.0.1:6379", 0, "f"), 0, "10.0.0.1:6379"),  # RAY_ADDRESS wins
        (None, StartRecord("127.0.0.1:6379", 0, "f"), 0, "127.0.0.1:6379"),  # this user's ray start
        (None, StartRecord("127.0.0.1:6379", 1234, "f"), 0, None),  # another user's
        (None, None, 0, None),  # nothing started
        ("", None, 0, None),
    ],
)
def test_auto_joins_ray_address_or_this_users_ray_start_record_only(env, record, uid, expected):
    assert auto_address(env, record, uid) == expected


@pytest.mark.parametrize(
    "cmdline, expected",
    [
        (["/usr/bin/python3", "/venv/bin/ray", "start", "--head", "--block"], True),
        (["/venv/bin/ray", "start", "--address=10.0.0.1:6379"], True),
        (["/usr/bin/python3", "train.py", "start"], False),
        (["/usr/bin/python3", "-m", "pytest", "tests/"], False),
    ],
)
def test_is_ray_start_command_recognises_the_cli_only(cmdline, expected):
    assert is_ray_start_command(cmdline) is expected


def _fake_proc(root, pid, cmdline, ppid, listening_inode=None):
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline) + b"\0")
    (d / "stat").write_text(f"{pid} ({os.path.basename(cmdline[0])[:15]}) S {ppid} 1 1 0")
    if listening_inode:
        os.symlink(f"socket:[{listening_inode}]", d / "fd" / "7")


@pytest.mark.parametrize(
    "parent, expected",
    [
        (["/usr/bin/python3", "-m", "pytest"], True),  # a test's Cluster / a ray.init() driver
        (["/usr/bin/python3", "/venv/bin/ray", "start", "--head", "--block"], False),
        (None, False),  # orphaned: `ray start` returned
    ],
)
def test_a_gcs_whose_parent_is_a_live_driver_is_another_processs_cluster(tmp_path, parent, expected):
    (tmp_path / "net").mkdir()
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (tmp_path / "net" / "tcp").write_text(  # 127.0.0.1:6379 listening (0A), inode 4242
        header + "   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242\n"
    )
    _fake_proc(
        tmp_path,
        50,
        ["/venv/lib/ray/core/src/ray/gcs/gcs_server", "--gcs_server_port=0"],
        1 if parent is None else 40,
        listening_inode=4242,
    )
    if parent is not None:
        _fake_proc(tmp_path, 40, parent, 1)
    assert gcs_started_by_another_process("127.0.0.1:6379", proc=str(tmp_path)) is expected
    assert gcs_started_by_another_process("127.0.0.1:7000", proc=str(tmp_path)) is False  # not on this machine


def _env(tmp: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # no token: nothing but the rule below keeps another process's cluster out of reach
    env.update(
        RAY_TMPDIR=tmp,
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="disabled",
        PYTHONPATH=os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p),
    )
    return env


OTHER_PROCESSES = {
    "ray.init": textwrap.dedent("""
        import sys, ray
        ray.init(include_dashboard=False, num_cpus=1, object_store_memory=80 * 2**20, log_to_driver=False)
        print(ray.get_runtime_context().gcs_address, flush=True)
        sys.stdin.read()  # until the test closes our stdin
        ray.shutdown()
    """),
    "cluster_utils": textwrap.dedent("""
        import sys
        from ray.cluster_utils import Cluster
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                          "object_store_memory": 80 * 2**20})
        print(c.address, flush=True)  # Cluster writes Ray's `ray start` record with this address
        sys.stdin.read()
        c.shutdown()
    """),
}

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


@pytest.mark.slow  # 25-105 s here: three Ray clusters start (theirs, then one per drop-in run)
@pytest.mark.parametrize("how", sorted(OTHER_PROCESSES))
def test_auto_does_not_attach_to_a_cluster_another_process_started(how, zygote):
    """A cluster another process started (ray.init(), or a test's Cluster, which writes Ray's
    `ray start` record) is never joined, neither found by scanning nor named by the record:
    the drop-in falls back to its own loopback cluster."""
    with tempfile.TemporaryDirectory(prefix="hl", dir="/tmp") as tmp:
        env = _env(tmp)
        other = subprocess.Popen(
            [sys.executable, "-c", OTHER_PROCESSES[how]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            theirs = other.stdout.readline().strip()
            assert ":" in theirs, "the other process did not start its cluster"
            for stale_record in (False, True) if how == "ray.init" else (True,):
                if stale_record and how == "ray.init":  # a record naming the ray.init() cluster
                    os.makedirs(os.path.join(tmp, "ray"), exist_ok=True)
                    with open(os.path.join(tmp, "ray", "ray_current_cluster"), "w") as f:
                        f.write(theirs)
                proc = zygote.run(code=DROP_IN, cwd=os.getcwd(), env=env, timeout=300)
                assert proc.returncode == 0, proc.stderr[-3000:]
                mine = json.loads(proc.stdout.strip().splitlines()[-1])
                assert mine["gcs"] != theirs, "the drop-in attached to another process's cluster"
                assert mine["nodes"] == ["127.0.0.1"] and mine["batches"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
                if stale_record:
                    assert "not `ray start`: not joining it" in proc.stderr
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
    for k in range(6):
        with hybridload.DataLoader(TensorDataset(torch.arange(8)), batch_size=4, distribute_mode=True,
                                   num_workers=1, head_address="embedded") as ld:
            assert [b[0].tolist() for b in ld] == [[0, 1, 2, 3], [4, 5, 6, 7]]
            if k == 0:  # the embedded cluster's workers' niceness, RAY_worker_niceness unset (a test below)
                worker = ray.get(ray.remote(lambda: os.nice(0)).options(num_cpus=0).remote(), timeout=300)
        gc.collect()
        out.append((len(os.listdir("/proc/self/fd")), rss_mb(), ray.get_runtime_context().get_job_id()))
    from hybridload.raycluster import _connect as cluster
    print(json.dumps({"cycles": out, "users": cluster.users(), "shut": cluster.shutdown(),
                      "after": ray.is_initialized(), "nice": {"trainer": os.nice(0), "worker": worker}}))
""")

# Stated bounds (measured: 35 fds after every cycle, RSS +1.7 MiB from cycle 1 to 20; one
# ray.init per loader used to take fds 6 -> 50 and RSS 225 -> 359 MB over 20 cycles, so 6
# cycles would show ~13 fds and ~40 MB).
FD_GROWTH, RSS_GROWTH_MB = 2, 16


@pytest.fixture(scope="module")
def cycles_run(zygote) -> dict:
    """CYCLES run once in a child of its own, RAY_worker_niceness unset (the user's choice, which the
    test session sets for its own cluster): its JSON line. Its embedded cluster serves two tests."""
    with tempfile.TemporaryDirectory(prefix="hl", dir="/tmp") as tmp:
        env = {k: v for k, v in _env(tmp).items() if k != "RAY_worker_niceness"}
        proc = zygote.run(code=CYCLES, cwd=os.getcwd(), env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # 55-80 s here: a Ray cluster and six actors start
def test_six_create_close_cycles_share_one_ray_connection_and_leak_no_fds_or_memory(cycles_run):
    got = cycles_run
    cycles = got["cycles"]
    assert len({job for _, _, job in cycles}) == 1, "a loader made its own Ray connection"
    assert cycles[-1][0] - cycles[0][0] <= FD_GROWTH, cycles
    assert cycles[-1][1] - cycles[0][1] < RSS_GROWTH_MB, cycles
    assert got["users"] == 0 and got["shut"] is True and got["after"] is False  # shutdown() when idle


NICENESS = textwrap.dedent("""
    import json, os
    os.environ["RAY_worker_niceness"] = "7"
    from hybridload.raycluster import _connect as cluster
    ray = cluster.acquire("embedded")
    try:
        worker = ray.get(ray.remote(lambda: os.nice(0)).options(num_cpus=0).remote(), timeout=300)
    finally:
        cluster.release()
        cluster.shutdown()
    print(json.dumps({"trainer": os.nice(0), "worker": worker}))
""")


@pytest.mark.parametrize("who", ["default", "user"])
def test_the_embedded_clusters_workers_run_at_the_trainers_priority_unless_the_user_sets_rays(who, request, zygote):
    """Ray nices its workers to 15; the embedded cluster's do what torch's worker processes do
    beside the trainer, so they run at its niceness, and a RAY_worker_niceness the user set stays.
    The default's reading comes from the cycles' embedded cluster (``cycles_run``)."""
    if who == "default":
        got = request.getfixturevalue("cycles_run")["nice"]
    else:
        with tempfile.TemporaryDirectory(prefix="hl", dir="/tmp") as tmp:
            env = {k: v for k, v in _env(tmp).items() if k != "RAY_worker_niceness"}
            proc = zygote.run(code=NICENESS, cwd=os.getcwd(), env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["worker"] == got["trainer"] + (7 if who == "user" else 0), got  # Ray adds it
