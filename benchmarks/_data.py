"""What a benchmark runs on: the generated photo set, Ray confined to loopback (embedded or a
simulated cluster), and the command-line flags every script shares."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from _harness import setup_logging
from hybridload import sources
from hybridload.cli.demo_data import make_photo_folder

DEFAULT_PHOTO_ROOT = Path(__file__).resolve().parents[1] / "data" / "bench-photos"
MB = 2**20


def photo_source(root: Path, n: int, log: logging.Logger | None = None) -> tuple[Path, sources.ImageFolder]:
    """(folder, ImageFolder) of the photo set of ``n`` JPEGs in ``root/n<n>`` (one folder per
    size, shared by every benchmark; generated on first use); refuses a folder that holds another
    number of images (a stale set: delete it to regenerate)."""
    folder, t0 = Path(root) / f"n{n}", time.perf_counter()
    make_photo_folder(folder, n)
    (log or logging.getLogger("benchmarks")).info(
        "photo set: %s (%d images; ready in %.1f s)", folder, n, time.perf_counter() - t0
    )
    source = sources.ImageFolder(folder)
    if len(source) != n:
        raise SystemExit(f"{folder} holds {len(source)} images, expected {n}; delete it to regenerate")
    return folder, source


# Ray reads these when it is imported, and every script imports this module before Ray:
# everything on 127.0.0.1, no usage stats.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"


def check_ray_loopback(ray) -> list[str]:
    """The addresses of the connected cluster's nodes; raises unless all are loopback."""
    addrs = sorted({n.get("NodeManagerAddress", "?") for n in ray.nodes() if n.get("Alive")})
    if not all(a.startswith("127.") for a in addrs):
        raise RuntimeError(f"Ray is not confined to loopback: node addresses {addrs}")
    return addrs


def embedded_ray(num_cpus: int, store_mb: int | None = None) -> list[str]:
    """Start an embedded Ray in this process on 127.0.0.1 (no dashboard, ``num_cpus`` logical
    CPUs); its node addresses, checked to be loopback. The caller calls ``ray.shutdown()``."""
    import ray

    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        object_store_memory=None if store_mb is None else store_mb * MB,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    return check_ray_loopback(ray)


@contextlib.contextmanager
def loopback_cluster(
    head_cpus: int = 1, worker_cpus: int = 1, workers: int = 1, store_mb: int = 200, connect: bool = True
):
    """A simulated multi-node Ray cluster on 127.0.0.1 (``ray.cluster_utils.Cluster``): a head
    and ``workers`` worker nodes; yields (cluster, worker nodes), this process connected if
    ``connect``. Shut down on exit."""
    import ray
    from ray.cluster_utils import Cluster

    cl = Cluster(
        initialize_head=True,
        connect=False,
        head_node_args=dict(
            num_cpus=head_cpus, include_dashboard=False, node_ip_address="127.0.0.1", object_store_memory=store_mb * MB
        ),
    )
    try:
        nodes = [
            cl.add_node(num_cpus=worker_cpus, node_ip_address="127.0.0.1", object_store_memory=store_mb * MB)
            for _ in range(workers)
        ]
        cl.wait_for_nodes(timeout=60)
        if connect:
            ray.init(address=cl.address, logging_level=logging.WARNING, log_to_driver=False)
            check_ray_loopback(ray)
        yield cl, nodes
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cl.shutdown()


COMMON_FLAGS = {  # flags several scripts take: (type, help); a script gives its default
    "batch_size": (int, "images per batch"),
    "size": (int, "output size of imagenet_train"),
    "workers": (
        int,
        "workers of each contestant (Ray actors, threads, DataLoader workers, Ray tasks, Ray Data "
        "CPUs or DALI threads)",
    ),
    "gpu_threads": (int, "DALI threads of the GPU lane"),
    "torch_threads": (int, "torch.set_num_threads in this process"),
    "object_store_mb": (int, "object store of the embedded Ray"),
    "ingest_batches": (int, "batches per round of the ingest test"),
    "ingest_store_mb": (int, "object store per node of the ingest test's 2-node cluster"),
    "plot": (Path, "write a chart (PNG) here"),
}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class BenchParser(argparse.ArgumentParser):
    """Made by :func:`parser`. ``parse_args`` also applies ``--quick``'s settings, checks
    ``--contestants`` against the known ones, refuses a number that is not positive
    (``--warmup-rounds`` and those named in ``nonnegative`` may be 0) and starts logging."""

    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        if ns.quick and isinstance(self.quick, dict):
            vars(ns).update(self.quick)
        if self.contestants:
            ns.contestants = [c for c in ns.contestants.split(",") if c]
            if set(ns.contestants) - set(self.contestants):
                self.error(
                    f"unknown contestants {sorted(set(ns.contestants) - set(self.contestants))}; "
                    f"known: {', '.join(self.contestants)}"
                )
        for k, v in vars(ns).items():
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if number and (v < 0 or v == 0 and k not in self.nonnegative):
                self.error(f"{flag(k)} must be {'>= 0' if k in self.nonnegative else 'positive'}, not {v}")
        setup_logging()
        return ns


def parser(
    doc: str,
    *,
    quick: dict | str = "",
    photos: bool = True,
    n: int = 1024,
    rounds: int = 5,
    contestants: Sequence[str] = (),
    nonnegative: Sequence[str] = (),
    **common,
) -> BenchParser:
    """A parser with the flags every benchmark shares: --quick (``quick``: the flags it sets, or
    what the script itself shrinks) and --out; with ``photos``, --root --n --rounds --warmup-rounds; with ``contestants``,
    --contestants (a subset of them); each of ``common`` (a name from COMMON_FLAGS: its default)."""
    ap = BenchParser(description=doc.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.quick, ap.contestants, ap.nonnegative = quick, contestants, {"warmup_rounds", *nonnegative}
    shown = quick if isinstance(quick, str) else " ".join(f"{flag(k)} {v}" for k, v in quick.items())
    ap.add_argument("--quick", action="store_true", help=f"smoke run: {shown or 'small n, one round'}")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    if photos:
        ap.add_argument(
            "--root",
            type=Path,
            default=DEFAULT_PHOTO_ROOT,
            help="where photo sets live; the set of N images is ROOT/nN (generated on first use)",
        )
        ap.add_argument("--n", type=int, default=n, help="number of photo JPEGs")
        ap.add_argument("--rounds", type=int, default=rounds, help="interleaved timed rounds (median reported)")
        ap.add_argument("--warmup-rounds", type=int, default=1, help="untimed rounds before the timed ones")
    if contestants:
        ap.add_argument("--contestants", default=",".join(contestants), help="comma-separated subset to run")
    for name, default in common.items():
        ap.add_argument(flag(name), type=COMMON_FLAGS[name][0], default=default, help=COMMON_FLAGS[name][1])
    return ap
