"""The soak's trainer: one rank of a training-like job, run as its own process (``python
_soak_trainer.py LIFE.json RANK``) so the soak can SIGKILL it and start it again.

It loops over the epochs as users do: ``set_epoch``, one step per batch (an all-reduce across
the gloo ranks as DDP's gradient sync, then a sleep standing for the model), a checkpoint every
``save_every`` steps and at each epoch's end, to the life's ``epochs`` or, sooner, the epoch the
soak asks for once its last fault is over (`_soak_stop.agreed_stop`, every rank at once). A
checkpoint holds rank 0's ``state_dict()`` and what every rank delivered up to it (each sample's
index, label, md5 of its pixels, an 8x8 thumbnail): what a restarted job keeps is exactly what
its checkpoint says was trained on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # support/: helpers the tests share

from _soak_stop import agreed_stop, write_json
from support.readings import fd_count, rss_kib

SIZE, BATCH = 32, 4
WINDOW = 3  # batches in flight (the loader's window)


def thumbnail(image: torch.Tensor) -> list[int]:
    """An image [3, H, W] uint8 as 8x8 block means per channel (a GPU engine's pixels are
    compared with the kernels' within a tolerance on these, never bit for bit)."""
    x = image.float().unsqueeze(0)
    return torch.nn.functional.adaptive_avg_pool2d(x, 8).round().to(torch.uint8).flatten().tolist()


def entries(epoch: int, seg: int, world: int, rank: int, images, labels, idx) -> list[list]:
    """One record row per sample: [epoch, world segment, world, rank, index, label, md5, thumbnail]."""
    return [
        [
            epoch,
            seg,
            world,
            rank,
            int(i),
            int(labels[k]),
            hashlib.md5(images[k].numpy().tobytes()).hexdigest(),
            thumbnail(images[k]),
        ]
        for k, i in enumerate(idx.tolist())
    ]


def make_source(life: dict):
    from hybridload import sources
    from hybridload.sources._read_retry import ReadRetry

    return sources.FileList(
        life["paths"],
        life["labels"],
        storage_options=life.get("storage_options"),
        io_threads=2,
        read_retry=ReadRetry(attempts=10, backoff_s=0.25, max_backoff_s=2.0),
    )


def make_policy(lanes: str, ray_address: str | None):
    """The lane configuration a life runs (the stream is the same under each)."""
    from hybridload import LoaderPolicy

    common = dict(batch_timeout_s=120, window=WINDOW)
    if lanes == "ray":
        return LoaderPolicy(
            ray_address=ray_address, mode="cpu", cpu_actors=2, reserve_local_cpus=1, on_no_actors="local", **common
        )
    if lanes == "processes":
        return LoaderPolicy(mode="cpu", cpu_actors=0, local_workers="processes", threads=2, **common)
    if lanes == "gpu":  # DALI's CPU-only stand-in, a CPU lane on stand-by
        return LoaderPolicy(
            mode="gpu", gpu_engine="dali", cpu_actors=0, threads=1, gpu_threads=1, break_after=3, **common
        )
    return LoaderPolicy(mode="cpu", cpu_actors=0, threads=2, **common)


def arm_gpu_faults(flag: Path) -> None:
    """The GPU lane's device fault, on CPU: the next batch DALI decodes after ``flag`` appears
    raises the message DALI gives for an illegal address on the device (recorded in
    tests/test_gpu_failures.py), once per flag."""
    from hybridload.lanes._gpu.dali import DaliLane
    from hybridload.lanes._gpu.failures import rerouting

    real = DaliLane._decode

    def decode(self, task, batch):
        try:
            os.unlink(flag)
        except FileNotFoundError:
            return real(self, task, batch)
        with rerouting(f"DALI on batch {task.seq}"):
            raise RuntimeError(
                "Error in MIXED operator `nvidia.dali.fn.decoders.image` ... CUDA runtime API error "
                "cudaErrorIllegalAddress (700): an illegal memory access was encountered"
            )

    DaliLane._decode = decode


def pool_now(loader) -> dict | None:
    """The Ray pool's ready and target actors now, its seconds without a ready actor, its lost
    actors and failed starts (None without a Ray lane): the soak times the pool's recovery by them."""
    pool = loader.stats().get("actor_pools", {}).get("ray")
    if pool is None:
        return None
    return {k: pool[k] for k in ("live", "target", "without_actors_s", "lost", "failed_starts")}


def write_progress(path: Path, step: int, epoch: int, status: list, t_first: float | None, loader) -> None:
    """This rank's progress for the soak: its last step, the epoch whose end comes next, its
    (fds, RSS, time) at each epoch end, its first step's time, its Ray pool."""
    write_json(
        path,
        {
            "step": step,
            "epoch": epoch,
            "pid": os.getpid(),
            "status": status,
            "t_first": t_first,
            "pool": pool_now(loader),
        },
    )


def main(life_path: str, rank: int) -> int:
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s rank {rank} %(name)s %(levelname)s %(message)s")
    life = json.loads(Path(life_path).read_text())
    world, run = life["world"], Path(life["run_dir"])
    ckpt_path = run / "checkpoint.json"
    dist = None
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{life['port']}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=60),
        )
    from hybridload import HybridLoader, recipe

    ckpt = json.loads(ckpt_path.read_text()) if ckpt_path.exists() else None
    if life["lanes"] == "gpu":
        arm_gpu_faults(run / f"gpu-fault-{rank}")
    loader = HybridLoader(
        make_source(life),
        recipe.imagenet_train(SIZE),
        BATCH,
        seed=life["seed"],
        rank=rank,
        world_size=world,
        policy=make_policy(life["lanes"], life.get("ray_address")),
        return_indices=True,
        device="cpu",
    )
    step, epoch, records = 0, 0, []
    segments = [[0, world, 0]]
    if ckpt is not None:
        loader.load_state_dict(ckpt["state"])
        step, epoch, records, segments = ckpt["step"], ckpt["next_epoch"], ckpt["records"], ckpt["segments"]
        if segments[-1][1] != world:
            segments.append([step, world, epoch])
    progress = run / f"progress-{rank}.json"
    mine: list = []
    status: list = []
    t_first = None  # when this job's first step ended (time.time())

    def save(next_epoch: int) -> None:
        nonlocal mine
        state = loader.state_dict()
        got = [mine]
        if dist is not None:
            got = [None] * world
            dist.all_gather_object(got, mine)
        if rank == 0:
            records.extend(row for part in got for row in part)
            write_json(
                ckpt_path,
                {
                    "state": state,
                    "step": step,
                    "next_epoch": next_epoch,
                    "records": records,
                    "segments": segments,
                    "lanes": life["lanes"],
                },
            )
        mine = []
        if dist is not None:
            dist.barrier()

    with loader:  # at most life["epochs"]; fewer when the soak asks for its stop (every rank at once)
        while epoch < life["epochs"] and not agreed_stop(run, epoch, rank, dist):
            loader.set_epoch(epoch)
            for images, labels, idx in loader:
                mine.extend(
                    row + [life["lanes"] == "gpu"]
                    for row in entries(epoch, len(segments) - 1, world, rank, images, labels, idx)
                )
                if dist is not None:
                    dist.all_reduce(torch.ones(4))
                time.sleep(life["step_s"])
                step += 1
                t_first = t_first or time.time()
                write_progress(progress, step, epoch, status, t_first, loader)
                if step % life["save_every"] == 0:
                    save(epoch)
            epoch += 1
            save(epoch)
            status.append((fd_count(), rss_kib(), time.time()))
            t_first = t_first or time.time()  # a resumed job at an epoch's end runs again here
            write_progress(progress, step, epoch, status, t_first, loader)
    if rank == 0:
        write_json(run / "done.json", {"step": step, "epochs": epoch, "status": status})
    if dist is not None:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
