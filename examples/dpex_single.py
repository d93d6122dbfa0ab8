"""Dpex usage 1: a single-process training loop whose DataLoader workers are Ray actors.

    python examples/dpex_single.py [--steps N] [--no-distribute]
"""

import argparse
import logging

import torch

import hybridload
from _data import ToyImages, small_model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--no-distribute", action="store_true", help="plain torch DataLoader behaviour")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    loader = hybridload.DataLoader(ToyImages(256), batch_size=32, shuffle=True, num_workers=10,
                                   distribute_mode=not args.no_distribute, head_address="auto")
    model = small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    with loader:
        while step < args.steps:
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                logging.info("step %d loss %.3f", step, loss.item())
                if step >= args.steps:
                    break


if __name__ == "__main__":
    main()
