"""Dpex usage 2: torch.nn.DataParallel with Ray actors as DataLoader workers.

DataParallel splits each batch over the visible GPUs (on a CPU-only machine it simply
runs the module). python examples/dpex_dataparallel.py [--steps N]
"""

import argparse
import logging

import torch

import hybridload
from _data import ToyImages, small_model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.DataParallel(small_model()).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = hybridload.DataLoader(ToyImages(256), batch_size=64, shuffle=True, num_workers=10,
                                   pin_memory=torch.cuda.is_available(), distribute_mode=True)
    with loader:
        for step, (x, y) in enumerate(loader, 1):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            logging.info("step %d loss %.3f", step, loss.item())
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
