"""HybridLoader in a LightningDataModule: the epoch set from the trainer, rank and world size
from the strategy, the loader's position saved in Lightning's checkpoints.

    pip install '.[lightning]'    # from a clone: the lightning extra
    python examples/lightning_module.py [--data ROOT] [--epochs E] [--batch-size B] [--ray]
    python examples/lightning_module.py --epochs 3 --checkpoint ckpt.ckpt     # saves at the end
    python examples/lightning_module.py --epochs 4 --resume ckpt.ckpt         # goes on from it

Three hooks carry the loader (the same ones a plain loop calls, see the README):
  setup()                 HybridLoader(..., rank=trainer.global_rank, world_size=trainer.world_size,
                          device=trainer.strategy.root_device)
  train_dataloader()      an iterable that calls loader.set_epoch(trainer.current_epoch) on every
                          iter(): Lightning calls iter() before on_train_epoch_start in the first
                          epoch (and more than once), and calls set_epoch itself only on a torch
                          DataLoader's sampler
  state_dict / load_state_dict   loader.state_dict() into the checkpoint and back
LoaderFigures, a callback, logs the loader's stats() (hybridload.loader_scalars: images/s, each
lane's share, the stall fraction, retries, skipped) through the module's log_dict every N steps,
so they land in whatever logger the Trainer has (TensorBoard, CSV, W&B).
With a validation set (val_root), val_dataloader() returns a second loader built with
even_batches=False: each validation sample once across the ranks, no padded repeats, ranks
allowed a batch fewer; validation_step logs with sync_dist=True on the epoch only, one reduction
after the last step, so a rank with fewer batches never leaves the others waiting.
Under DDP (Trainer(strategy="ddp", devices=N)) each rank builds its own loader in setup().
"""

from __future__ import annotations

import lightning as L
import torch

from hybridload import HybridLoader, loader_scalars, recipe, sources

from _common import log, parser, photo_folder, policy, setup_logging, small_cnn


# --8<-- [start:datamodule]
class PhotoData(L.LightningDataModule):
    """An ImageFolder through a HybridLoader, one per rank."""

    def __init__(self, root: str, batch_size: int, loader_policy, size: int = 64, return_indices: bool = False,
                 val_root: str | None = None):
        super().__init__()
        self.root, self.batch_size, self.loader_policy = root, batch_size, loader_policy
        self.size, self.return_indices, self.val_root = size, return_indices, val_root
        self.loader: HybridLoader | None = None
        self.val_loader: HybridLoader | None = None
        self.final_state: dict | None = None     # the loader's state when fit() ended (for a checkpoint after it)

    def setup(self, stage: str) -> None:
        if self.loader is None:
            trainer = self.trainer
            self.loader = HybridLoader(
                sources.ImageFolder(self.root), recipe.imagenet_train(self.size, normalize=True), self.batch_size,
                policy=self.loader_policy, seed=0, shuffle=True, drop_last=True,
                rank=trainer.global_rank, world_size=trainer.world_size,      # from the strategy
                device=trainer.strategy.root_device, return_indices=self.return_indices)
        if self.val_root is not None and self.val_loader is None:
            trainer = self.trainer
            self.val_loader = HybridLoader(
                sources.ImageFolder(self.val_root), recipe.imagenet_eval(self.size, normalize=True), self.batch_size,
                policy=self.loader_policy, shuffle=False,
                even_batches=False,                   # each sample once across the ranks: no padded repeats
                rank=trainer.global_rank, world_size=trainer.world_size,
                device=trainer.strategy.root_device, return_indices=self.return_indices)

    def train_dataloader(self) -> "EpochFromTrainer":
        return EpochFromTrainer(self.loader, self.trainer)

    def val_dataloader(self) -> HybridLoader | list:
        return self.val_loader if self.val_loader is not None else []

    def state_dict(self) -> dict:
        if self.loader is not None:
            return {"loader": self.loader.state_dict()}
        return {"loader": self.final_state} if self.final_state is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if "loader" in state:  # Lightning restores after setup(): the loader exists
            self.loader.load_state_dict(state["loader"])

    def teardown(self, stage: str) -> None:
        if self.loader is not None:
            self.final_state = self.loader.state_dict()
            self.loader.close()
            self.loader = None
        if self.val_loader is not None:
            self.val_loader.close()
            self.val_loader = None


class EpochFromTrainer:
    """The loader with its epoch taken from the trainer each time an epoch's iteration begins."""

    def __init__(self, loader: HybridLoader, trainer: L.Trainer):
        self.loader, self.trainer = loader, trainer

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        self.loader.set_epoch(self.trainer.current_epoch)   # set_epoch(e) wins, however often iter() is called
        return iter(self.loader)


# --8<-- [end:datamodule]


# --8<-- [start:figures]
class LoaderFigures(L.Callback):
    """The loader's figures in the module's logger: `loader_scalars(loader.stats())` every
    ``every`` training steps (the first included), through ``LightningModule.log_dict``."""

    def __init__(self, every: int = 50):
        self.every = every

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loader = getattr(trainer.datamodule, "loader", None)
        if loader is not None and batch_idx % self.every == 0:
            pl_module.log_dict(loader_scalars(loader.stats()), on_step=True, on_epoch=False)


# --8<-- [end:figures]


class Classifier(L.LightningModule):
    def __init__(self, num_classes: int):
        super().__init__()
        self.net = small_cnn(num_classes)
        self.seen: dict[int, list[list[int]]] = {}   # epoch -> the indices of each batch (for the test)
        self.val_seen: dict[int, list[int]] = {}     # epoch -> the validation indices this rank saw

    def training_step(self, batch, batch_idx):
        images, labels = batch[0], batch[1]                    # float32, normalized, on the module's device
        if len(batch) == 3:
            self.seen.setdefault(self.current_epoch, []).append(batch[2].tolist())
        loss = torch.nn.functional.cross_entropy(self.net(images), labels)
        log.info("epoch %d step %d loss %.3f", self.current_epoch, batch_idx + 1, loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        images, labels = batch[0], batch[1]
        if len(batch) == 3 and not self.trainer.sanity_checking:
            self.val_seen.setdefault(self.current_epoch, []).extend(batch[2].tolist())
        correct = (self.net(images).argmax(1) == labels).sum().float()
        # on the epoch only: summed over this rank's steps, then once across the ranks after its last step
        self.log("val_correct", correct, on_step=False, on_epoch=True, sync_dist=True, reduce_fx="sum")
        self.log("val_samples", float(len(labels)), on_step=False, on_epoch=True, sync_dist=True, reduce_fx="sum")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def make_trainer(epochs: int, steps: int | None = None, logger=False, callbacks=(), validate: bool = False) -> L.Trainer:
    return L.Trainer(max_epochs=epochs, accelerator="auto", devices=1, logger=logger,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     limit_train_batches=steps or 1.0, limit_val_batches=1.0 if validate else 0,
                     callbacks=list(callbacks), log_every_n_steps=1)


def main() -> None:
    ap = parser(__doc__, epochs=2)
    ap.add_argument("--checkpoint", help="save a Lightning checkpoint (the loader's state included) here at the end")
    ap.add_argument("--resume", help="go on from this checkpoint")
    ap.add_argument("--logs", help="log the loader's figures (LoaderFigures) to a TensorBoard folder here")
    ap.add_argument("--val-data", help="an ImageFolder tree to validate on after each epoch (each sample once)")
    args = ap.parse_args()
    setup_logging()
    root = photo_folder(args.data)
    data = PhotoData(root, args.batch_size, policy(args), val_root=args.val_data)
    model = Classifier(len(sources.ImageFolder(root).classes))
    logger: object = False
    if args.logs:  # TensorBoard when it is installed, else Lightning's CSV files
        from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

        try:
            import tensorboard  # noqa: F401
            logger = TensorBoardLogger(args.logs)
        except ImportError:
            logger = CSVLogger(args.logs)
    trainer = make_trainer(args.epochs, args.steps, logger=logger, callbacks=[LoaderFigures(every=10)] if args.logs else (),
                           validate=args.val_data is not None)
    trainer.fit(model, datamodule=data, ckpt_path=args.resume)
    if args.checkpoint:
        trainer.save_checkpoint(args.checkpoint)


if __name__ == "__main__":
    main()
