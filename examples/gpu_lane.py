"""HybridLoader with the GPU lane: decode and augment on the GPU, the CPU lane alongside.

    python examples/gpu_lane.py [--data ROOT] [--steps N] [--epochs E] [--share S]

``gpu_engine="auto"`` takes DALI when it imports and builds on the GPU, else the torch
engine (torchvision's nvJPEG); without either — or without a GPU — the loader says so in
one warning and the batches go to the CPU lane, so this script runs anywhere.
"""

import time

import torch

from hybridload import HybridLoader, LoaderPolicy, recipe, sources

from _common import log, parser, photo_folder, setup_logging, small_cnn


def main():
    ap = parser(__doc__, epochs=1)
    ap.add_argument("--share", type=float, default=0.5, help="fraction of batches the GPU lane takes")
    args = ap.parse_args()
    setup_logging()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    source = sources.ImageFolder(photo_folder(args.data))
    rec = recipe.imagenet_train(96, normalize=True)
    policy = LoaderPolicy(mode="split", gpu_share=args.share, gpu_engine="auto", cpu_actors=0)
    model = small_cnn(len(source.classes)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with HybridLoader(source, rec, args.batch_size, policy=policy, device=device, seed=0) as loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            t0, seen = time.perf_counter(), 0
            for step, (images, labels) in enumerate(loader, 1):   # on `device`, normalized
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
                seen += len(labels)
                log.info("epoch %d step %d loss %.3f", epoch, step, loss.item())
                if args.steps and step >= args.steps:
                    break
            log.info("epoch %d: %.0f images/s", epoch, seen / (time.perf_counter() - t0))
        lanes = loader.stats()["lanes"]
        log.info("lanes used: %s", sorted(lanes))


if __name__ == "__main__":
    main()
