"""Dpex usage 3: DistributedDataParallel with a DistributedSampler and Ray actors as workers.

    torchrun --nproc_per_node 2 examples/dpex_ddp.py [--steps N]

Each rank has its own actor pool (a fair share of the cluster's CPUs) and all ranks use
one Ray cluster: start one with `ray start --head` and every rank connects to it
(head_address="auto"); without one, each rank starts an embedded cluster of its own.
"""

import argparse
import logging
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

import hybridload
from _data import ToyImages, small_model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(small_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dataset = ToyImages(256)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = hybridload.DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=10,
                                   distribute_mode=True)
    with loader:
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            for step, (x, y) in enumerate(loader, 1):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if rank == 0:
                    logging.info("epoch %d step %d loss %.3f", epoch, step, loss.item())
                if step >= args.steps:
                    break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
