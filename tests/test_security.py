"""The embedded cluster listens on loopback only; a token-authenticated cluster accepts the
loader with the right token and refuses it without. (Plan files are JSON, validated, never
unpickled: see test_planner.py.) The loaders run in the session's zygote (a child forked from an
interpreter that imported torch already, as ``python -c`` gives the code); the cluster's host is a
process of its own."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path


LISTEN_PROBE = textwrap.dedent("""
    import json, os
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    def listening():
        out = {}
        for path, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
            for line in open(path).read().splitlines()[1:]:
                f = line.split()
                if f[3] != "0A":  # LISTEN
                    continue
                ip_hex, port_hex = f[1].split(":")
                if v6:
                    ip = ip_hex
                else:
                    ip = ".".join(str(int(ip_hex[i:i + 2], 16)) for i in (6, 4, 2, 0))
                out[f[9]] = (ip, int(port_hex, 16))
        return out

    def family(root):
        pids, changed = {root}, True
        while changed:
            changed = False
            for p in os.listdir("/proc"):
                if p.isdigit() and int(p) not in pids:
                    try:
                        ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
                    except OSError:
                        continue
                    if ppid in pids:
                        pids.add(int(p)); changed = True
        return pids

    ld = HybridLoader(sources.ImageFolder(os.environ["DATA"]), recipe.imagenet_train(32), 4,
                      policy=LoaderPolicy(ray_address="embedded", cpu_actors=1))
    next(iter(ld))
    lst, found = listening(), []
    for pid in family(os.getpid()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in lst:
                found.append([pid] + list(lst[link[8:-1]]))
    ld.close()
    print("SOCKETS " + json.dumps(found))
""")

LOOPBACK = {
    "127.0.0.1",
    "00000000000000000000000001000000",  # ::1
    "0000000000000000FFFF00000100007F",
}  # ::ffff:127.0.0.1


def test_embedded_cluster_listens_on_loopback_only(photo_root, zygote):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(DATA=photo_root, RAY_USAGE_STATS_ENABLED="0")  # no loopback variable: hybridload must set it
    proc = zygote.run(code=LISTEN_PROBE, cwd=Path.cwd(), env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("SOCKETS "))
    import json

    sockets = json.loads(line[len("SOCKETS ") :])
    assert len(sockets) >= 3, sockets  # GCS, raylet, workers...
    exposed = [s for s in sockets if s[1] not in LOOPBACK]
    assert exposed == [], f"listening beyond loopback: {exposed}"


CLUSTER_HOST = textwrap.dedent("""
    import os, sys
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                "node_ip_address": "127.0.0.1", "object_store_memory": 150 * 1024 * 1024})
    print("ADDRESS " + c.address, flush=True)
    sys.stdin.read()          # runs until the test closes stdin
    c.shutdown()
""")

CLIENT = textwrap.dedent("""
    import os
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources
    ld = HybridLoader(sources.ImageFolder(os.environ["DATA"]), recipe.imagenet_train(32), 4,
                      policy=LoaderPolicy(cpu_actors=1, reserve_local_cpus=0, ray_address=os.environ["ADDR"]))
    n = sum(1 for _ in ld)
    ld.close()
    print("BATCHES", n)
""")


def test_token_authenticated_cluster_admits_the_right_token_only(photo_root, tmp_path, zygote):
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    base.update(RAY_USAGE_STATS_ENABLED="0", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="token")
    host = subprocess.Popen(
        [sys.executable, "-c", CLUSTER_HOST],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**base, "RAY_AUTH_TOKEN": "s3cret-token-1"},
    )
    try:
        deadline = time.monotonic() + 120
        address = None
        while time.monotonic() < deadline:
            line = host.stdout.readline()
            if line.startswith("ADDRESS "):
                address = line.split()[1]
                break
        assert address, "the token cluster did not start"
        ok = zygote.run(
            code=CLIENT,
            cwd=tmp_path,
            timeout=180,
            env={**base, "DATA": photo_root, "ADDR": address, "RAY_AUTH_TOKEN": "s3cret-token-1"},
        )
        assert "BATCHES 15" in ok.stdout, ok.stderr[-3000:]
        start = time.monotonic()
        bad = zygote.run(
            code=CLIENT,
            cwd=tmp_path,
            timeout=180,
            env={**base, "DATA": photo_root, "ADDR": address, "RAY_AUTH_TOKEN": "wrong-token"},
        )
        refused_in = time.monotonic() - start
        assert bad.returncode != 0 and "BATCHES" not in bad.stdout
        last = bad.stderr.strip().splitlines()[-1]  # the error the user reads: one line naming the address
        assert last.startswith("ConnectionError") and address in last and "InvalidAuthToken" in last, last
        assert refused_in < 15, f"a wrong token was refused after {refused_in:.1f} s (Ray's own retries took ~22 s)"
    finally:
        host.stdin.close()
        try:
            host.wait(timeout=60)
        except subprocess.TimeoutExpired:
            host.kill()
            host.wait(10)
