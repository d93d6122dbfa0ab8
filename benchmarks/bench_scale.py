#!/usr/bin/env python
"""TarShards at internet scale on one machine: today's path (a brace pattern, every shard
scanned, every sample's facts in the trainer) against a manifest (O(shards) in the trainer,
members read per shard by the workers).

The data set is simulated: ``--real`` real shards of 1,000 tiny JPEGs (each sample with a
``.cls`` label), hard-linked into as many shard files as a point needs
(``ROOT/links/DDD/shard-FFF.tar``, shard ``s`` = ``DDD * 1000 + FFF``; real shard ``s %
real``), each with its sidecar member index hard-linked beside it, and one manifest per point
listing the first ``N / 1000`` links. The manifest is written here from the known counts (what
``hybridload index`` would write for them: ``--index-shards`` times the command itself on
that many shards, for its rate).

Per point and path, in a fresh process (``PYTHONPATH`` = the tree measured; today's path runs
the tree of ``--old-commit``, extracted with ``git archive``): construction time, pickled source
size, the trainer's peak RSS (and after imports), rank 3 of 8, batch 64, the default
``LoaderPolicy()``: seconds from ``iter`` to the first batch, and the same for the next
epoch; the batch's labels checked against the ``.cls`` each index's shard holds. The manifest
path uses ``order="keyed"`` (the epoch order is O(batch), not O(samples)); today's path the
default ``order="randperm"``. ``--mix``: also a 3-source ``Mix`` (weights 0.5/0.3/0.2, each a
manifest of a third of the shards, N per epoch). Between the two passes the script waits 3 s,
untimed: the process lane refuses a new pass's tasks ("more than N tasks in flight") while the abandoned pass's
batches still hold its slots, which breaks the lane (a bug of the lane, not of the source).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

log = logging.getLogger("bench_scale")
REPO = Path(__file__).resolve().parents[1]
PER_SHARD = 1000


def label_of(index: int, real: int) -> int:
    """The .cls of sample ``index`` (shard ``index // 1000``, position ``index % 1000``)."""
    return ((index // PER_SHARD) % real * 7 + index % PER_SHARD * 3) % 1000


def make_real_shards(root: Path, real: int) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    jpegs = []
    for _ in range(16):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(buf, "JPEG", quality=80)
        jpegs.append(buf.getvalue())
    (root / "real").mkdir(parents=True, exist_ok=True)
    for r in range(real):
        path = root / "real" / f"real-{r}.tar"
        if path.exists():
            continue
        with tarfile.open(path, "w") as tf:
            for j in range(PER_SHARD):
                for name, data in (
                    (f"s{j:04d}.jpg", jpegs[j % 16]),
                    (f"s{j:04d}.cls", str(label_of(r * PER_SHARD + j, real)).encode()),
                ):
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime = len(data), 1_700_000_000
                    tf.addfile(info, io.BytesIO(data))


def shard_path(root: Path, s: int) -> Path:
    return root / "links" / f"{s // 1000:03d}" / f"shard-{s % 1000:03d}.tar"


def make_links(root: Path, shards: int, real: int) -> None:
    """Shard files 0 .. shards-1 as hard links to the real shards, each with its sidecar."""
    from hybridload.sources._tar.tar_index import SIDECAR_SUFFIX, index_shard, write_sidecar

    for r in range(real):
        src = str(root / "real" / f"real-{r}.tar")
        if not os.path.exists(src + SIDECAR_SUFFIX):
            write_sidecar(src, *reversed(index_shard(src)))
    t0, made = time.perf_counter(), 0
    for s in range(shards):
        dst = shard_path(root, s)
        if s % 1000 == 0:
            dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists():
            continue
        src = root / "real" / f"real-{s % real}.tar"
        os.link(src, dst)
        os.link(str(src) + SIDECAR_SUFFIX, str(dst) + SIDECAR_SUFFIX)
        made += 1
    log.info("links: %d made (%d wanted) in %.1f s", made, shards, time.perf_counter() - t0)


def manifest(root: Path, shards: int) -> Path:
    path = root / f"manifest-{shards}.json"
    if not path.exists():
        doc = {
            "wids_version": 1,
            "shardlist": [
                {"url": str(shard_path(root, s).relative_to(root)), "nsamples": PER_SHARD} for s in range(shards)
            ],
        }
        path.write_text(json.dumps(doc, separators=(",", ":")))
    return path


def pattern(root: Path, shards: int) -> str:
    if shards <= 1000:
        return str(root / "links" / "000" / f"shard-{{000..{shards - 1:03d}}}.tar")
    return str(root / "links" / f"{{000..{shards // 1000 - 1:03d}}}" / "shard-{000..999}.tar")


CHILD = r"""
import json, pickle, sys, time
def hwm_kb():  # this process's peak RSS (VmHWM: reset by exec, unlike ru_maxrss)
    return int(next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:")).split()[1])
spec, keyed, real, mix = sys.argv[1], sys.argv[2] != "randperm", int(sys.argv[3]), sys.argv[2] == "mix"
from hybridload import HybridLoader, LoaderPolicy, recipe, sources
rss0 = hwm_kb()
t = time.perf_counter()
parts = [sources.TarShards(spec) for _ in range(3 if mix else 1)]
src = sources.Mix(list(zip(parts, (0.5, 0.3, 0.2))), epoch_length=3 * len(parts[0]), repeat=True) if mix else parts[0]
build, per = time.perf_counter() - t, src.sizes[0] if mix else 1 << 62  # a mixture's index: source k's sample i % per
t = time.perf_counter(); pickled = len(pickle.dumps(src)); pickle_s = time.perf_counter() - t
kw = {"order": "keyed"} if keyed else {}
ld = HybridLoader(src, recipe.imagenet_eval(32), 64, seed=0, rank=3, world_size=8, return_indices=True,
                  policy=LoaderPolicy(), **kw)
def first():
    t = time.perf_counter(); it = iter(ld); images, labels, idx = next(it); s = time.perf_counter() - t
    want = [((i % per // 1000) % real * 7 + i % per % 1000 * 3) % 1000 for i in idx.tolist()]
    ok = labels.tolist() == want and len(idx) == 64
    del it
    return s, ok
first_s, ok0 = first()
time.sleep(3)  # untimed: the abandoned pass's batches finish (a new pass's tasks are refused while they hold the process lane's slots)
ld.set_epoch(1)
next_s, ok1 = first()
ld.close()
print("RESULT", json.dumps({"n": len(src), "build_s": build, "pickled": pickled, "pickle_s": pickle_s,
      "rss0_kb": rss0, "peak_kb": hwm_kb(), "first_s": first_s,
      "next_s": next_s, "labels_ok": ok0 and ok1}))
"""


def measure(tree: Path, spec: str, mode: str, real: int, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-c", CHILD, spec, mode, str(real)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(tree),
    )
    line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"the measurement of {spec} failed:\n{run.stderr[-8000:]}")
    out = json.loads(line[7:])
    out["wall_s"] = time.perf_counter() - t0
    return out


def old_tree(commit: str, root: Path) -> Path:
    """The tree of ``commit`` (today's path), extracted once, with the kernels/pipelines links."""
    tree = root / f"tree-{commit[:12]}"
    if not tree.exists():
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        for name in ("kernels", "pipelines", "torchops"):
            if (tree / name).is_dir() and not (tree / "hybridload" / name).exists():
                os.symlink(f"../{name}", tree / "hybridload" / name)
    return tree


def index_rate(root: Path, shards: int) -> dict:
    """``hybridload index`` on the first ``shards`` links (sidecars already there: rewritten)."""
    out = root / f"indexed-{shards}.json"
    for p in (out, Path(str(out) + ".partial")):
        if p.exists():
            p.unlink()
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "hybridload", "index", pattern(root, shards), "-o", str(out), "--quiet"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
        capture_output=True,
    )
    return {"shards": shards, "seconds": time.perf_counter() - t0}


def plot(rows: list[dict], path: Path) -> None:
    """Bytes per sample against N (log-log): the trainer's RSS above its imports, and the pickled source."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, style in (("today", "o-"), ("manifest", "s-")):
        got = sorted((r for r in rows if r["path"] == name), key=lambda r: r["n"])
        if not got:
            continue
        ns = [r["n"] for r in got]
        ax.plot(
            ns,
            [max(r["peak_kb"] - r["rss0_kb"], 1) * 1024 / r["n"] for r in got],
            style,
            label=f"{name}: trainer RSS above imports",
        )
        ax.plot(ns, [r["pickled"] / r["n"] for r in got], style.replace("-", "--"), label=f"{name}: pickled source")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("samples N (1,000 per shard)")
    ax.set_ylabel("bytes per sample")
    ax.set_title("TarShards: bytes per sample against N (bench_scale.py)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/hl-scale"), help="where the simulated set lives")
    ap.add_argument("--points", default="100000,1000000,10000000,1000000000", help="sample counts, comma-separated")
    ap.add_argument("--old-points", default="100000,1000000", help="points also measured on today's path")
    ap.add_argument("--old-commit", default="863aaa7", help="the commit of today's path")
    ap.add_argument(
        "--real", type=int, default=32, help="real shards the links point to (ext4 allows 65,000 links to one file)"
    )
    ap.add_argument("--index-shards", type=int, default=1000, help="shards `hybridload index` is timed on (0: skip)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per measurement")
    ap.add_argument("--mix", action="store_true", help="also a 3-source Mix of the same N per epoch")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--plot", type=Path, default=None, help="write a PNG of bytes per sample against N here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    points = [int(p) for p in args.points.split(",")]
    old_points = {int(p) for p in args.old_points.split(",") if p}
    make_real_shards(args.root, args.real)
    make_links(args.root, max(points) // PER_SHARD, args.real)
    rows = []
    index = index_rate(args.root, args.index_shards) if args.index_shards else None
    if index:
        log.info("hybridload index: %d shards in %.1f s", index["shards"], index["seconds"])
    for n in points:
        shards = n // PER_SHARD
        runs = [("manifest", REPO, str(manifest(args.root, shards)), "keyed")]
        runs += [("mix", REPO, str(manifest(args.root, shards // 3)), "mix")] if args.mix else []
        if n in old_points:
            runs.insert(0, ("today", old_tree(args.old_commit, args.root), pattern(args.root, shards), "randperm"))
        for path, tree, spec, mode in runs:
            got = measure(tree, spec, mode, args.real, args.timeout)
            got.update(path=path, shards=shards)
            rows.append(got)
            log.info(
                "%s N=%d: build %.2f s, pickled %.2f MB, peak RSS %.0f MB (%.0f after imports), first batch "
                "%.2f s, next epoch %.2f s, labels %s",
                path,
                got["n"],
                got["build_s"],
                got["pickled"] / 1e6,
                got["peak_kb"] / 1024,
                got["rss0_kb"] / 1024,
                got["first_s"],
                got["next_s"],
                "right" if got["labels_ok"] else "WRONG",
            )
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "index": index}, indent=1))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
