"""Lightning's ``Trainer(strategy="ddp_spawn", devices=2)`` with the Ray lane on an embedded
cluster of this machine's CPUs (issue 29): with 2 CPUs and one reserved for the trainer, rank 1
got no actor and stopped the job ("no CPU left for rank 1's actors"). Now a rank the cluster
cannot give actors runs on the local lane with one warning. Real parts: Lightning's spawned
ranks (the script's module classes travel to them), gloo, Ray's embedded cluster, the
examples' ``PhotoData``. Asserts each rank's batches are exactly its batches of the epoch (so
every sample once per epoch across the ranks), under a deadline that kills the process group."""

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload._policy import usable_cpus
from support.jobs import run_job

ROOT = Path(__file__).resolve().parents[1]
BATCH, EPOCHS, SIZE = 8, 2, 32

SCRIPT = """
import json, logging, os, sys
logging.basicConfig(level=logging.WARNING)  # module level: the spawned ranks run it too
sys.path.insert(0, %(examples)r)
import lightning as L
from hybridload import LoaderPolicy, sources
from lightning_module import Classifier, PhotoData

class Recording(Classifier):
    def on_train_end(self):
        stats = self.trainer.datamodule.loader.stats()
        record = {"seen": {str(e): v for e, v in self.seen.items()}, "fallback": stats["fallback"]["batches"],
                  "lanes": sorted(stats["lanes"])}
        with open(os.path.join(sys.argv[2], "rank%%d.json" %% self.global_rank), "w") as f:
            json.dump(record, f)

if __name__ == "__main__":
    root = sys.argv[1]
    data = PhotoData(root, %(batch)d, LoaderPolicy(ray_address="embedded"), size=%(size)d, return_indices=True)
    trainer = L.Trainer(strategy="ddp_spawn", accelerator="cpu", devices=2, max_epochs=%(epochs)d, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Recording(len(sources.ImageFolder(root).classes)), datamodule=data)
""" % {"examples": str(ROOT / "examples"), "batch": BATCH, "size": SIZE, "epochs": EPOCHS}


def _expected(root, rank, epoch):
    with HybridLoader(
        sources.ImageFolder(root),
        recipe.imagenet_train(SIZE, normalize=True),
        BATCH,
        seed=0,
        shuffle=True,
        drop_last=True,
        rank=rank,
        world_size=2,
        device="cpu",
        policy=LoaderPolicy(cpu_actors=0),
    ) as ld:
        return [b.tolist() for b in ld.batch_indices(epoch)]


@pytest.mark.timeout(300)
def test_lightning_ddp_spawn_on_the_ray_lane_gives_each_rank_its_batches_with_or_without_actors(
    photo_root, tmp_path, zygote
):
    pytest.importorskip("lightning")
    script = tmp_path / "train_spawn.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0")
    out = run_job(
        [sys.executable, str(script), photo_root, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        what="Lightning ddp_spawn with the Ray lane",
        deadline_s=240,
        zygote=zygote,
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, record in enumerate(ranks):
        for epoch in range(EPOCHS):
            assert record["seen"][str(epoch)] == _expected(photo_root, rank, epoch), (rank, epoch)
    if usable_cpus() <= 2:  # 2 CPUs, 1 reserved for the trainer: one actor, and rank 1 none
        assert "ray" in ranks[0]["lanes"] and ranks[1]["lanes"] == ["local-fallback"], ranks
        assert ranks[1]["fallback"] >= EPOCHS * len(_expected(photo_root, 1, 0))  # (Lightning's extra iter() too)
        assert "no CPU in the Ray cluster for rank 1's actors" in out
