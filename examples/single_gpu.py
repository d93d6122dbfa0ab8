"""HybridLoader in one training process: the model on CUDA when there is a GPU, else on the CPU.

    python examples/single_gpu.py [--data ROOT] [--steps N] [--epochs E] [--ray]

Batches arrive already decoded, augmented, normalized and on the model's device.
"""

import time

import torch

from hybridload import HybridLoader, recipe, sources

from _common import log, parser, photo_folder, policy, setup_logging, small_cnn


def main():
    args = parser(__doc__, epochs=2).parse_args()
    setup_logging()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    source = sources.ImageFolder(photo_folder(args.data))
    rec = recipe.imagenet_train(96, normalize=True)   # Decode, RandomResizedCrop, flip, Normalize
    model = small_cnn(len(source.classes)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with HybridLoader(source, rec, args.batch_size, policy=policy(args), device=device, seed=0) as loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            t0, seen = time.perf_counter(), 0
            for step, (images, labels) in enumerate(loader, 1):   # already on `device`
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
                seen += len(labels)
                log.info("epoch %d step %d loss %.3f", epoch, step, loss.item())
                if args.steps and step >= args.steps:
                    break
            log.info("epoch %d: %.0f images/s", epoch, seen / (time.perf_counter() - t0))
        st = loader.stats()  # the lanes work ahead of the loop: a window of batches made but not yet taken
        log.info("%d batches delivered to the loop; the lanes made %d images, the window's prefetched ones "
                 "included (per lane: %s)", st["batches_delivered"], st["images"],
                 {name: lane["images"] for name, lane in st["lanes"].items()})


if __name__ == "__main__":
    main()
