"""Accuracy parity (as in Dpex's table): the same small CNN, trained the same way on a generated
photo-crop classification set, reaches the same accuracy whichever lanes made its batches.

Classes are the source photograph a crop came from (learnable); every 5th image is held out.
Modes: "cpu" (in-process lane), "split" (GPU lane at share 0.5 + in-process lane) and "gpu"
(the GPU lane; DALI's CPU-only mode here). The index streams must be identical across modes;
the pixels differ only by the GPU lane's rounding. ``--augment`` picks the training
augmentation of ``recipe.imagenet_train`` (hybridload.recipe._presets): "basic" (crop + flip, the
default), "color" (+ ColorJitter) or "trivialaugment" (+ TrivialAugmentWide, RandomErasing);
the crop keeps this script's scale (0.35, 1.0) whichever is chosen.

Exit status 1 when the index streams differ or the held-out accuracies spread by more than the
tolerance (--tolerance, default 3 points).
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the harness and the photo set

import _harness as h
from _data import parser
from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.cli.demo_data import _photo_paths, make_photo_folder
from hybridload.recipe._presets import AUGMENTS, train_stages

log = logging.getLogger("accuracy_parity")
MODES = {
    "cpu": LoaderPolicy(mode="cpu", cpu_actors=0, threads=2),
    "split": LoaderPolicy(mode="split", gpu_share=0.5, cpu_actors=0, threads=1, gpu_threads=1),
    "gpu": LoaderPolicy(mode="gpu"),
}


def run(mode: str, train, test, epochs: int, seed: int = 0, augment: str = "basic") -> dict:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(  # the same small CNN in every mode
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 32),
    )
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    rec_train = recipe.Recipe(train_stages(64, normalize=True, augment=augment, scale=(0.35, 1.0)))
    stream, t0, loss = [], time.perf_counter(), float("nan")
    with HybridLoader(train, rec_train, 32, policy=MODES[mode], seed=seed, return_indices=True, device="cpu") as ld:
        for epoch in range(epochs):
            ld.set_epoch(epoch)
            net.train()
            for images, labels, idx in ld:
                stream.append(tuple(idx.tolist()))
                loss_t = F.cross_entropy(net(images), labels)
                opt.zero_grad()
                loss_t.backward()
                opt.step()
                loss = loss_t.item()
        shares = {k: v["share"] for k, v in ld.stats()["lanes"].items()}
    correct = total = 0
    net.eval()
    with (
        HybridLoader(
            test, recipe.imagenet_eval(64, normalize=True), 64, policy=MODES[mode], shuffle=False, device="cpu"
        ) as ld,
        torch.no_grad(),
    ):
        for images, labels in ld:
            correct += (net(images).argmax(1) == labels).sum().item()
            total += labels.numel()
    return {
        "mode": mode,
        "final_train_loss": round(loss, 4),
        "test_accuracy": round(100 * correct / total, 2),
        "test_images": total,
        "lane_shares": shares,
        "seconds": round(time.perf_counter() - t0, 1),
        "stream": stream,
    }


def main(argv=None) -> int:
    ap = parser(__doc__, photos=False, quick=dict(epochs=1, per_class=5), nonnegative=("tolerance",))
    ap.add_argument(
        "--augment", choices=AUGMENTS, default="basic", help="training augmentation (recipe.imagenet_train's presets)"
    )
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--per-class", type=int, default=40, help="crops per class (source photograph); 1 in 5 held out")
    ap.add_argument(
        "--tolerance",
        type=float,
        default=3.0,
        help="largest allowed spread of held-out accuracy across modes, in points",
    )
    args = ap.parse_args(argv)
    logging.getLogger("hybridload").setLevel(logging.WARNING)
    classes = len(_photo_paths())
    with tempfile.TemporaryDirectory() as tmp:
        folder = sources.ImageFolder(make_photo_folder(tmp, classes * args.per_class, num_classes=classes, seed=3))
        train, test = (
            sources.FileList([folder.paths[k] for k in ks], [folder.ref(k).label for k in ks])
            for ks in ([k for k in range(len(folder)) if k % 5 != 0], range(0, len(folder), 5))
        )
        results = [run(m, train, test, args.epochs, augment=args.augment) for m in MODES]
    same_stream = all(r["stream"] == results[0]["stream"] for r in results)
    accs = [r["test_accuracy"] for r in results]
    within = max(accs) - min(accs) <= args.tolerance
    lines = [
        f"## accuracy parity: {classes} classes (source photograph), {len(train)} train / {len(test)} held-out "
        f"crops at 64 px, augment={args.augment!r}, {args.epochs} epochs, same seed",
        "",
        *h.markdown_table(
            ["mode", "lane shares", "final train loss", "held-out accuracy", "seconds"],
            [
                [
                    r["mode"],
                    ", ".join(f"{k} {v:.0%}" for k, v in r["lane_shares"].items()),
                    f"{r['final_train_loss']:.3f}",
                    f"{r['test_accuracy']:.1f}%",
                    r["seconds"],
                ]
                for r in results
            ],
        ),
    ]
    lines += [
        "",
        f"- index streams identical across modes: {'yes' if same_stream else 'NO'}",
        f"- accuracy spread: {max(accs) - min(accs):.1f} points (stated tolerance {args.tolerance:g}; "
        f"one held-out image = {100 / len(test):.1f} points; chance {100 / classes:.1f}%): "
        f"{'within' if within else 'OUTSIDE'}",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    if args.out:
        h.write_json(
            args.out,
            [{k: v for k, v in r.items() if k != "stream"} for r in results]
            + [
                {
                    "augment": args.augment,
                    "same_stream": same_stream,
                    "accuracy_spread": max(accs) - min(accs),
                    "tolerance": args.tolerance,
                    "within_tolerance": within,
                }
            ],
        )
    return 0 if same_stream and within else 1


if __name__ == "__main__":
    sys.exit(main())
