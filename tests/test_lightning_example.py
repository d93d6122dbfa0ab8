"""examples/lightning_module.py: under Lightning's Trainer each epoch gets the loader's batches
for that epoch (the epoch set from the trainer), and a checkpoint resumes with the next epoch's."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")  # the `lightning` extra (part of `dev`)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from lightning_module import Classifier, PhotoData, make_trainer  # noqa: E402

from hybridload import HybridLoader, LoaderPolicy, recipe, sources  # noqa: E402

BATCH = 8


def _expected(root, epoch):
    with HybridLoader(
        sources.ImageFolder(root),
        recipe.imagenet_train(64, normalize=True),
        BATCH,
        seed=0,
        shuffle=True,
        drop_last=True,
        rank=0,
        world_size=1,
        device="cpu",
    ) as ld:
        return [b.tolist() for b in ld.batch_indices(epoch)]


def _fit(root, epochs, ckpt_path=None, save_to=None):
    data = PhotoData(root, BATCH, LoaderPolicy(cpu_actors=0, threads=1), size=64, return_indices=True)
    model = Classifier(len(sources.ImageFolder(root).classes))
    trainer = make_trainer(epochs)
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    if save_to:
        trainer.save_checkpoint(save_to)
    return model


def test_each_lightning_epoch_gets_that_epochs_batches(photo_root):
    model = _fit(photo_root, epochs=2)
    assert sorted(model.seen) == [0, 1]
    for epoch in (0, 1):
        assert model.seen[epoch] == _expected(photo_root, epoch)
    assert model.seen[0] != model.seen[1]  # the epoch really changed the order


def test_a_lightning_checkpoint_resumes_with_the_next_epoch(photo_root, tmp_path):
    ckpt = tmp_path / "one.ckpt"
    first = _fit(photo_root, epochs=1, save_to=str(ckpt))
    assert sorted(first.seen) == [0]
    resumed = _fit(photo_root, epochs=2, ckpt_path=str(ckpt))
    assert sorted(resumed.seen) == [1] and resumed.seen[1] == _expected(photo_root, 1)


def test_the_loaders_figures_reach_the_trainers_logger_every_nth_step(photo_root, tmp_path):
    import csv

    from lightning.pytorch.loggers import CSVLogger
    from lightning_module import LoaderFigures

    data = PhotoData(photo_root, BATCH, LoaderPolicy(cpu_actors=0, threads=1), size=64)
    model = Classifier(len(sources.ImageFolder(photo_root).classes))
    logger = CSVLogger(str(tmp_path), name="run", version=0)
    trainer = make_trainer(1, steps=5, logger=logger, callbacks=[LoaderFigures(every=2)])
    trainer.fit(model, datamodule=data)
    with open(tmp_path / "run" / "version_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    wanted = {"hybridload/images_per_s", "hybridload/stall_fraction", "hybridload/retries", "hybridload/skipped"}
    wanted |= {f"hybridload/lanes/inprocess/{k}" for k in ("images_per_s", "share", "retries")}
    assert wanted <= set(rows[0]), sorted(rows[0])
    assert [int(r["step"]) for r in rows] == [0, 1, 2, 3, 4], rows
    # read on batches 0, 2 and 4; Lightning shows a step-logged value again at the steps between
    rates = [r["hybridload/images_per_s"] for r in rows]
    assert rates[0] == rates[1] != rates[2] == rates[3] != rates[4], rates
    assert all(float(r["hybridload/lanes/inprocess/share"]) == 1.0 for r in rows), rows
    assert all(0 < float(r["hybridload/stall_fraction"]) < 1 for r in rows), rows
