"""With no cluster configured, the default policy runs on this machine without Ray."""

import json
import os
import textwrap

SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    def descendants(pid):
        kids = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    with open(f"/proc/{d}/cmdline", "rb") as f:
                        kids.setdefault(ppid, []).append((int(d), f.read().replace(b"\\0", b" ").decode()))
                except (OSError, ValueError, IndexError):
                    pass
        out, todo = [], [pid]
        while todo:
            for child, cmd in kids.get(todo.pop(), []):
                out.append(cmd)
                todo.append(child)
        return out

    t0 = time.perf_counter()
    with HybridLoader(sources.ImageFolder(sys.argv[1]), recipe.imagenet_train(64), 8, device="cpu") as ld:
        next(iter(ld))
        first = time.perf_counter() - t0
        kids = descendants(os.getpid())
        lanes = ld.describe_lanes()
    ray = sys.modules.get("ray")
    print(json.dumps({"first_s": first, "ray_initialized": bool(ray and ray.is_initialized()),
                      "ray_children": [k for k in kids  # by program name: forked workers repeat this script's text
                                       if os.path.basename(k.split(" ", 1)[0]) in ("raylet", "gcs_server")],
                      "lanes": lanes}))
""")


def test_default_policy_on_one_machine_starts_no_ray_and_yields_within_seconds(photo_root, zygote):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = zygote.run(code=SCRIPT, args=(photo_root,), cwd=os.getcwd(), env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not got["ray_initialized"] and got["ray_children"] == [], got
    assert "Ray" not in got["lanes"], got
    # Ray's embedded start-up alone takes ~6 s here; the local lane's first batch well under that
    assert got["first_s"] < 3.0, got
