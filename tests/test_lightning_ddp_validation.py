"""Lightning's validation under DDP counts each sample once: ``examples/lightning_module.py``'s
data module with a validation set (its loader built with ``even_batches=False``) under
``Trainer(strategy="ddp_spawn", devices=2)`` on gloo and the CPU. 17 validation photos at batch 8
give rank 0 nine samples (two batches) and rank 1 eight (one batch): each rank's
``validation_step`` sees its share, the two together every sample once, and the metric logged
with ``sync_dist=True`` on the epoch sums the 17 across the ranks, every epoch, without waiting
on the rank that stopped early. The job runs under a deadline that kills its process group."""

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from hybridload.cli.demo_data import make_photo_folder
from support.jobs import run_job

ROOT = Path(__file__).resolve().parents[1]
BATCH, EPOCHS, VAL = 8, 2, 17

SCRIPT = """
import json, os, sys
sys.path.insert(0, %(examples)r)
import lightning as L
from hybridload import LoaderPolicy, sources
from lightning_module import Classifier, PhotoData

class Recording(Classifier):
    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.val_batches = getattr(self, "val_batches", 0) + len(self.trainer.datamodule.val_loader)

    def on_train_end(self):
        metrics = {k: float(v) for k, v in self.trainer.callback_metrics.items() if k.startswith("val_")}
        record = {"val_seen": {str(e): v for e, v in self.val_seen.items()}, "metrics": metrics,
                  "val_batches": self.val_batches}
        with open(os.path.join(sys.argv[3], "rank%%d.json" %% self.global_rank), "w") as f:
            json.dump(record, f)

if __name__ == "__main__":
    train, val = sys.argv[1], sys.argv[2]
    data = PhotoData(train, %(batch)d, LoaderPolicy(cpu_actors=0, threads=1), size=32, return_indices=True,
                     val_root=val)
    trainer = L.Trainer(strategy="ddp_spawn", accelerator="cpu", devices=2, max_epochs=%(epochs)d, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_train_batches=2)
    trainer.fit(Recording(len(sources.ImageFolder(train).classes)), datamodule=data)
""" % {"examples": str(ROOT / "examples"), "batch": BATCH, "epochs": EPOCHS}


@pytest.mark.timeout(300)
def test_lightning_validation_under_ddp_sees_each_sample_once_with_uneven_batch_counts_and_no_hang(
    photo_root, tmp_path, zygote
):
    pytest.importorskip("lightning")
    val = make_photo_folder(tmp_path / "val", VAL, num_classes=3, seed=2)
    script = tmp_path / "validate_ddp.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0")
    run_job(
        [sys.executable, str(script), photo_root, str(val), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        what="Lightning ddp_spawn validating with even_batches=False",
        deadline_s=240,
        zygote=zygote,
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["val_batches"] for r in ranks] == [2 * EPOCHS, 1 * EPOCHS]  # uneven: rank 1 a batch fewer
    for epoch in map(str, range(EPOCHS)):
        shares = [r["val_seen"][epoch] for r in ranks]
        assert [len(s) for s in shares] == [9, 8]
        assert sorted(shares[0] + shares[1]) == list(range(VAL))  # every sample once, no padded repeat
    for r in ranks:  # the epoch's metric, reduced across the ranks once: the same on both
        assert r["metrics"]["val_samples"] == VAL and 0 <= r["metrics"]["val_correct"] <= VAL
