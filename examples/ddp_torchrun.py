"""HybridLoader under DistributedDataParallel, one process per GPU, launched by torchrun.

    torchrun --nproc_per_node 2 examples/ddp_torchrun.py [--data ROOT] [--steps N] [--epochs E]
             [--checkpoint DIR] [--resume] [--ray]

* The process group is NCCL on GPUs, gloo on the CPU.
* HybridLoader takes rank and world size from torch.distributed: each rank gets the
  batches DistributedSampler + BatchSampler would give it, and every rank the same number
  of batches (unequal counts hang DDP). ``set_epoch`` each epoch reshuffles.
* At the end each rank saves ``loader.state_dict()`` (plain data: epoch and position) next
  to the model; ``--resume`` continues from it with exactly the batches not yet delivered.
* With ``--ray`` every rank gets its own pool of Ray CPU actors, a fair share of the
  cluster (set RAY_ADDRESS so that all ranks join one cluster).
"""

import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from hybridload import HybridLoader, recipe, sources

from _common import log, parser, photo_folder, policy, setup_logging, small_cnn


def main():
    ap = parser(__doc__, epochs=2)
    ap.add_argument("--checkpoint", default="checkpoints", help="directory for the model and loader state")
    ap.add_argument("--resume", action="store_true", help="continue from the state in --checkpoint")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=300))
    rank = dist.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    setup_logging(rank)
    if cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")

    root = photo_folder(args.data) if rank == 0 else None   # generate once, then share the path
    shared = [root]
    dist.broadcast_object_list(shared, src=0)
    source = sources.ImageFolder(shared[0])

    model = torch.nn.parallel.DistributedDataParallel(small_cnn(len(source.classes)).to(device),
                                                      device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = HybridLoader(source, recipe.imagenet_train(96, normalize=True), args.batch_size,
                          policy=policy(args), seed=0)          # rank/world_size from torch.distributed
    state_path = os.path.join(args.checkpoint, f"loader-rank{rank}.json")
    first_epoch = 0
    if args.resume:
        ckpt = torch.load(os.path.join(args.checkpoint, "model.pt"), map_location=device)
        model.module.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        with open(state_path) as f:
            loader.load_state_dict(json.load(f))
        first_epoch = loader.epoch
        log.info("resumed at epoch %d, batch %d of %d", loader.epoch, loader.state_dict()["position"], len(loader))

    with loader:
        for epoch in range(first_epoch, args.epochs):
            loader.set_epoch(epoch)          # keeps a resumed position within that same epoch
            for step, (images, labels) in enumerate(loader, 1):
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if rank == 0:
                    log.info("epoch %d step %d loss %.3f", epoch, step, loss.item())
                if args.steps and step >= args.steps:
                    break
        os.makedirs(args.checkpoint, exist_ok=True)
        with open(state_path, "w") as f:
            json.dump(loader.state_dict(), f)
        if rank == 0:
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict()},
                       os.path.join(args.checkpoint, "model.pt"))
        log.info("saved the loader state (epoch %d, position %d) to %s", loader.epoch, loader.state_dict()["position"],
                 state_path)
        log.info("lanes used: %s", sorted(loader.stats()["lanes"]))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
