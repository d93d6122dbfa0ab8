"""A CIFAR-style DDP run with HybridLoader doing what DistributedSampler + DataLoader do in
PyTorch's distributed data loading tutorials: shard, shuffle per epoch, decode, augment.

    torchrun --nproc_per_node 2 examples/cifar_ddp.py [--data ROOT] [--steps N] [--epochs E] [--ray]

* Data: ``ROOT/train/<class>/*.png`` and ``ROOT/test/<class>/*.png``, 32x32 images in 10
  classes. Without ``--data`` a small set is generated from photo crops (the labels are
  arbitrary, so expect chance accuracy: this shows the data flow, not a result).
* Train recipe: RandomResizedCrop(32) + horizontal flip + Normalize with CIFAR-10's
  statistics (the crop's scale range is narrowed to (0.5, 1) for 32-pixel images).
  Eval recipe: the shape of ``recipe.imagenet_eval`` (Resize, CenterCrop) at 32 pixels.
* Sharding: ``HybridLoader`` reads rank and world size from torch.distributed and gives
  each rank DistributedSampler's indices (``set_epoch`` reshuffles); the eval loader runs
  with ``shuffle=False``. As with DistributedSampler, a test set that does not divide by
  the world size is padded with repeated samples; the generated one divides evenly.
"""

import os
import tempfile
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from hybridload import HybridLoader, recipe, sources
from hybridload.cli.demo_data import make_photo_images

from _common import log, parser, policy, setup_logging

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)

TRAIN = recipe.make([recipe.Decode(), recipe.RandomResizedCrop(32, scale=(0.5, 1.0)), recipe.HorizontalFlip(0.5),
                     recipe.Normalize(CIFAR_MEAN, CIFAR_STD)])
EVAL = recipe.make([recipe.Decode(), recipe.Resize(32), recipe.CenterCrop(32), recipe.Normalize(CIFAR_MEAN, CIFAR_STD)])


class Net(torch.nn.Module):
    """The small CNN of PyTorch's CIFAR-10 tutorial."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 6, 5)
        self.pool = torch.nn.MaxPool2d(2, 2)
        self.conv2 = torch.nn.Conv2d(6, 16, 5)
        self.fc1 = torch.nn.Linear(16 * 5 * 5, 120)
        self.fc2 = torch.nn.Linear(120, 84)
        self.fc3 = torch.nn.Linear(84, num_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def make_cifar_like(root: Path, train: int = 400, test: int = 100, classes: int = 10) -> Path:
    """Write 32x32 PNGs (center crops of small photo crops) as root/{train,test}/<class>/."""
    import io

    from PIL import Image
    marker = root / ".hybridload-cifar"
    key = f"{train} {test} {classes}"
    if marker.exists() and marker.read_text() == key:
        return root
    for split, n, seed in (("train", train, 0), ("test", test, 1)):
        for i, jpeg in enumerate(make_photo_images(n, seed=seed, short_side=(32, 32))):
            im = Image.open(io.BytesIO(jpeg)).convert("RGB")
            left, top = (im.width - 32) // 2, (im.height - 32) // 2
            d = root / split / f"class_{i % classes}"
            d.mkdir(parents=True, exist_ok=True)
            im.crop((left, top, left + 32, top + 32)).save(d / f"{i:05d}.png")
    marker.write_text(key)
    return root


def main():
    args = parser(__doc__, epochs=2, batch_size=32).parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=300))
    rank = dist.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    setup_logging(rank)
    if cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")

    shared = [args.data or (str(make_cifar_like(Path(tempfile.gettempdir()) / "hybridload-examples-cifar"))
                            if rank == 0 else None)]
    dist.broadcast_object_list(shared, src=0)   # rank 0 generated the data; everyone gets its path
    train_src = sources.ImageFolder(os.path.join(shared[0], "train"))
    test_src = sources.ImageFolder(os.path.join(shared[0], "test"))

    model = torch.nn.parallel.DistributedDataParallel(Net(len(train_src.classes)).to(device),
                                                      device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train = HybridLoader(train_src, TRAIN, args.batch_size, policy=policy(args), seed=0, shuffle=True)
    test = HybridLoader(test_src, EVAL, args.batch_size, policy=policy(args), shuffle=False)
    with train, test:
        for epoch in range(args.epochs):
            model.train()
            train.set_epoch(epoch)            # DistributedSampler.set_epoch: a new shuffle per epoch
            for step, (images, labels) in enumerate(train, 1):
                loss = F.cross_entropy(model(images), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if rank == 0:
                    log.info("epoch %d step %d loss %.3f", epoch, step, loss.item())
                if args.steps and step >= args.steps:
                    break
            model.eval()
            counts = torch.zeros(2, device=device)
            with torch.no_grad():
                for images, labels in test:
                    counts[0] += (model(images).argmax(1) == labels).sum()
                    counts[1] += len(labels)
            dist.all_reduce(counts)           # correct and seen, summed over ranks
            if rank == 0:
                log.info("epoch %d test accuracy %.3f over %d images", epoch, (counts[0] / counts[1]).item(),
                         int(counts[1]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
