"""HybridLoader feeding torch.nn.DataParallel: one process, the batch split over all visible GPUs.

    python examples/dataparallel.py [--data ROOT] [--steps N] [--epochs E] [--ray]

The loader delivers each batch to cuda:0 (pinned host buffers, non-blocking copy);
DataParallel scatters it to the other GPUs. Without a GPU it simply runs the module on
the CPU. (For more than one GPU, DistributedDataParallel — see ddp_torchrun.py — is faster.)
"""

import torch

from hybridload import HybridLoader, recipe, sources

from _common import log, parser, photo_folder, policy, setup_logging, small_cnn


def main():
    args = parser(__doc__, batch_size=32).parse_args()
    setup_logging()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda:0" if cuda else "cpu")
    source = sources.ImageFolder(photo_folder(args.data))
    model = torch.nn.DataParallel(small_cnn(len(source.classes))).to(device)
    log.info("DataParallel over %d GPU(s)", torch.cuda.device_count() if cuda else 0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rec = recipe.imagenet_train(96, normalize=True)
    with HybridLoader(source, rec, args.batch_size, policy=policy(args), device=device, seed=0) as loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            for step, (images, labels) in enumerate(loader, 1):
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
                log.info("epoch %d step %d loss %.3f", epoch, step, loss.item())
                if args.steps and step >= args.steps:
                    break


if __name__ == "__main__":
    main()
