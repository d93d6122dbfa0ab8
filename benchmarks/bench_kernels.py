#!/usr/bin/env python
"""hybridload's CPU kernels against DALI's CPU pipeline and a plain Pillow pipeline.

All contestants run side by side in one process, interleaved: every round runs each
contestant once over the whole photo set (the starting contestant rotates from round to
round), and the report gives the median images/s per contestant over the rounds. Only
ratios measured this way are meaningful; absolute rates vary from run to run and with
whatever else the machine is doing.

Contestants (the ImageNet training recipe: RandomResizedCrop(224) + random flip, uint8
CHW output):

* ``kernels``: ``kernels.process_sample`` in a plain loop (1 thread), and a
  ThreadPoolExecutor(2) mapping ``kernels.process_batch`` over batches (2 threads).
  ``torch.set_num_threads(1)`` is set at start so each call's resize uses one core.
* ``dali``: readers.file -> decoders.image_random_crop(cpu) -> resize -> crop_mirror_normalize,
  ``num_threads`` 1 and 2, CPU only (``device_id=None``).
* ``pillow-ref``: Image.open + convert("RGB") + crop + resize(BILINEAR) + flip, 1 thread,
  with the same crop boxes and flips (``recipe.sample_params``).
* decode only, 1 thread, from bytes already in memory: Pillow vs simplejpeg (libjpeg-turbo).

One untimed round of every contestant (``--warmup-rounds``) comes first. DALI gets a
fresh pipeline each round (built and warmed up for 2 iterations outside the timed part,
deleted afterwards) so its prefetching never runs while another contestant is timed.

Also reported: CPU utilisation (process CPU seconds / wall seconds over the timed part),
which shows when a contestant uses more cores than its thread count says (DALI's reader
runs its own thread), and images per CPU-second.

Goal: kernels >= 1.0x DALI's CPU pipeline per core (at 1 and at 2 threads).

Run:  python benchmarks/bench_kernels.py [--n 1024] [--rounds 5] [--out bench-kernels.json]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from hybridload import kernels, ops, recipe, sources

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_busy_s  # noqa: E402  (shared helpers of benchmarks/)
from _common import ratio  # noqa: E402
from _common import photo_source  # noqa: E402

log = logging.getLogger("bench_kernels")

REPO = Path(__file__).resolve().parents[1]
GOAL_KERNELS_OVER_DALI = 1.0
OTHER_LOAD_WARN = 0.2  # cores used by other processes during a timed run


# --------------------------------------------------------------------------- contestants

class Contestant:
    """One thing to time. ``run()`` processes the whole set once and returns the number of
    images it produced; ``setup``/``warmup``/``close`` are untimed."""

    name = ""
    threads = 1
    kind = "pipeline"  # "pipeline" (full recipe) or "decode" (decode only)

    def setup(self) -> None:
        pass

    def warmup(self) -> None:
        pass

    def run(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class KernelsLoop(Contestant):
    """kernels.process_sample over every index, one thread."""

    def __init__(self, source, rec):
        self.name, self.threads = "kernels", 1
        self.source, self.rec = source, rec

    def warmup(self) -> None:
        for i in range(min(64, len(self.source))):
            kernels.process_sample(self.source, self.rec, i, seed=0, epoch=0)

    def run(self) -> int:
        src, rec = self.source, self.rec
        for i in range(len(src)):
            kernels.process_sample(src, rec, i, seed=0, epoch=0)
        return len(src)


class KernelsPool(Contestant):
    """ThreadPoolExecutor(T) mapping kernels.process_batch over consecutive batches."""

    def __init__(self, source, rec, threads: int, batch_size: int):
        self.name, self.threads = "kernels", threads
        self.source, self.rec = source, rec
        n = len(source)
        self.batches = [np.arange(s, min(s + batch_size, n), dtype=np.int64) for s in range(0, n, batch_size)]
        self.pool: ThreadPoolExecutor | None = None

    def setup(self) -> None:
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix=f"bench-kernels-{self.threads}t")

    def _one(self, idx):
        return kernels.process_batch(self.source, self.rec, idx, 0, 0, on_error="raise")

    def warmup(self) -> None:
        list(self.pool.map(self._one, self.batches[:self.threads]))

    def run(self) -> int:
        return sum(len(r.indices) for r in self.pool.map(self._one, self.batches))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


class DaliPipeline(Contestant):
    """DALI's CPU pipeline. A fresh pipeline per round: built, warmed up (2 iterations,
    untimed), timed over ceil(n / batch) iterations, then deleted. Deleting it each round
    keeps its prefetching from running (and taking CPU) while other contestants are timed."""

    def __init__(self, folder: Path, n: int, threads: int, batch_size: int, size: int):
        self.name, self.threads = "dali", threads
        self.folder, self.n, self.batch_size, self.size = folder, n, batch_size, size
        self.iterations = math.ceil(n / batch_size)
        self._pipe = None

    def _build(self):
        from nvidia.dali import fn, pipeline_def, types

        root, size = str(self.folder), self.size

        @pipeline_def(batch_size=self.batch_size, num_threads=self.threads, device_id=None)
        def rrc_pipeline():
            jpegs, labels = fn.readers.file(file_root=root, random_shuffle=False, name="Reader")
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_x=size, resize_y=size)
            images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(), dtype=types.UINT8,
                                              output_layout="CHW")
            return images, labels

        pipe = rrc_pipeline()
        pipe.build()
        found = pipe.epoch_size("Reader")
        if found != self.n:
            del pipe
            raise RuntimeError(f"DALI's reader found {found} files under {root}, expected {self.n}")
        return pipe

    def setup(self) -> None:
        pipe = self._build()  # checks the file count once; also loads DALI's libraries
        del pipe

    def warmup(self) -> None:
        pass  # each round warms its own pipeline up (outside the timed part)

    def before_run(self) -> None:
        self._pipe = self._build()
        for _ in range(2):
            self._pipe.run()

    def run(self) -> int:
        pipe = self._pipe
        images = 0
        for _ in range(self.iterations):
            out, _labels = pipe.run()
            images += len(out)
        return images

    def after_run(self) -> None:
        pipe, self._pipe = self._pipe, None
        del pipe

    def close(self) -> None:
        self.after_run()


class PillowReference(Contestant):
    """The straightforward Pillow pipeline, torchvision style: open, convert, crop, resize,
    flip, to a CHW tensor. Same crop boxes and flips as the kernels."""

    def __init__(self, source, rec):
        self.name, self.threads = "pillow-ref", 1
        self.source, self.rec = source, rec

    def _one(self, i: int) -> torch.Tensor:
        ref = self.source.ref(i)
        with Image.open(ref.location) as im:
            img = im.convert("RGB")
        params = self.rec.sample_params(0, 0, i, img.width, img.height)
        for op in params.ops:
            if isinstance(op, ops.Crop):
                img = img.crop((op.x, op.y, op.x + op.w, op.y + op.h))
            elif isinstance(op, ops.Resize):
                img = img.resize((op.w, op.h), Image.BILINEAR)
            elif isinstance(op, ops.Flip):
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
        # as torchvision's pil_to_tensor: a writable copy, then CHW
        return torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous()

    def warmup(self) -> None:
        for i in range(min(64, len(self.source))):
            self._one(i)

    def run(self) -> int:
        for i in range(len(self.source)):
            self._one(i)
        return len(self.source)


class PillowDecode(Contestant):
    """Pillow full decode of in-memory JPEG bytes to an RGB HWC array."""

    kind = "decode"

    def __init__(self, payloads: list[bytes]):
        self.name, self.threads = "pillow-decode", 1
        self.payloads = payloads

    @staticmethod
    def _one(data: bytes) -> np.ndarray:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            if im.mode != "RGB":
                im = im.convert("RGB")
            return np.asarray(im)

    def warmup(self) -> None:
        for data in self.payloads[:64]:
            self._one(data)

    def run(self) -> int:
        for data in self.payloads:
            self._one(data)
        return len(self.payloads)


class SimplejpegDecode(Contestant):
    """simplejpeg (libjpeg-turbo) decode of in-memory JPEG bytes to an RGB HWC array."""

    kind = "decode"

    def __init__(self, payloads: list[bytes]):
        import simplejpeg
        self.name, self.threads = "simplejpeg-decode", 1
        self.payloads, self._decode = payloads, simplejpeg.decode_jpeg

    def warmup(self) -> None:
        for data in self.payloads[:64]:
            self._decode(data, colorspace="RGB")

    def run(self) -> int:
        dec = self._decode
        for data in self.payloads:
            dec(data, colorspace="RGB")
        return len(self.payloads)


# --------------------------------------------------------------------------- timing

def key(c: Contestant) -> str:
    return f"{c.name}/{c.threads}t"


def time_round(c: Contestant) -> dict:
    before = getattr(c, "before_run", None)
    after = getattr(c, "after_run", None)
    if before:
        before()
    try:
        m0, c0, t0 = machine_busy_s(), time.process_time(), time.perf_counter()
        images = c.run()
        wall, cpu, m1 = time.perf_counter() - t0, time.process_time() - c0, machine_busy_s()
    finally:
        if after:
            after()
    other = None if m0 is None or m1 is None else max(0.0, (m1 - m0 - cpu) / wall)
    return {"images": images, "wall_s": wall, "cpu_s": cpu, "images_per_s": images / wall,
            "cpu_util": cpu / wall, "other_load": other}


def contended(other_load: float | None, threads: int) -> bool:
    """Other processes wanted more than the cores this contestant leaves free."""
    free = max(0, len(os.sched_getaffinity(0)) - threads)
    return other_load is not None and other_load > free + OTHER_LOAD_WARN


def summarize(rounds: list[dict], threads: int) -> dict:
    rates = [r["images_per_s"] for r in rounds]
    utils = [r["cpu_util"] for r in rounds]
    per_cpu = [r["images"] / r["cpu_s"] for r in rounds if r["cpu_s"] > 0]
    other = [r["other_load"] for r in rounds if r["other_load"] is not None]
    return {"median_images_per_s": statistics.median(rates), "min_images_per_s": min(rates),
            "max_images_per_s": max(rates), "median_cpu_util": statistics.median(utils),
            "median_images_per_cpu_s": statistics.median(per_cpu) if per_cpu else None,
            "median_other_load": statistics.median(other) if other else None,
            "contended_rounds": sum(contended(o, threads) for o in other),
            "rounds": rounds}


# --------------------------------------------------------------------------- report

def environment() -> dict:
    env = {"python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
           "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
           "pillow": Image.__version__}
    try:
        import simplejpeg
        env["simplejpeg"] = simplejpeg.__version__
    except (ImportError, AttributeError):
        env["simplejpeg"] = None
    try:
        import nvidia.dali as dali
        env["dali"] = dali.__version__
    except ImportError:
        env["dali"] = None
    return env


def fmt(x, spec=".0f"):
    return "n/a" if x is None else format(x, spec)


def report(args, env, results, ratios, goal, order) -> str:
    out = []
    out.append(f"## bench_kernels: {args.n} photo JPEGs, {args.rounds} interleaved rounds "
               f"(after {args.warmup_rounds} untimed), "
               f"RandomResizedCrop({args.size}) + flip, uint8 CHW\n")
    out.append(f"Python {env['python']}, torch {env['torch']}, DALI {env['dali']}, Pillow {env['pillow']}, "
               f"simplejpeg {env['simplejpeg']}; {env['affinity']} CPUs usable; "
               f"load average {env['loadavg_start'][0]:.2f} at start, {env['loadavg_end'][0]:.2f} at end.\n")
    out.append("| contestant | threads | median img/s | min | max | CPU util | img per CPU-s | other load | "
               "contended rounds |")
    out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for k in order:
        r = results[k]
        out.append(f"| {k.split('/')[0]} | {k.split('/')[1][:-1]} | {r['median_images_per_s']:.0f} | "
                   f"{r['min_images_per_s']:.0f} | {r['max_images_per_s']:.0f} | {r['median_cpu_util']:.2f} | "
                   f"{fmt(r['median_images_per_cpu_s'])} | {fmt(r['median_other_load'], '.2f')} | "
                   f"{r['contended_rounds']}/{len(r['rounds'])} |")
    out.append("")
    out.append("CPU util: this process's CPU seconds / wall seconds (all its threads). Other load: cores "
               "used by other processes meanwhile (from /proc/stat, steal included); a round counts as "
               f"contended when that exceeds the cores the contestant leaves free by {OTHER_LOAD_WARN}. "
               "Medians resist a few contended rounds; many make the figures unreliable.\n")
    out.append("| ratio | of medians | per round: median (min-max) |")
    out.append("| --- | ---: | ---: |")
    for name, r in ratios.items():
        if r is None:
            out.append(f"| {name} | n/a | n/a |")
        else:
            out.append(f"| {name} | {r['of_medians']:.2f}x | {r['paired_median']:.2f}x "
                       f"({r['paired_min']:.2f}-{r['paired_max']:.2f}) |")
    out.append("")
    out.append(f"Goal: kernels >= {GOAL_KERNELS_OVER_DALI:.1f}x DALI's CPU pipeline per core "
               "(images/s, same thread count; ratio of medians).")
    for name, ok in goal.items():
        out.append(f"- {name}: " + ("n/a (DALI not run)" if ok is None else ("met" if ok else "NOT met")))
    out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--root", type=Path, default=REPO / "data" / "bench-photos",
                    help="where photo sets live; the set of N images is ROOT/nN (generated on first use)")
    ap.add_argument("--n", type=int, default=1024, help="number of images")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median reported)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="untimed full rounds before the timed ones")
    ap.add_argument("--batch-size", type=int, default=64, help="DALI batch and kernels batch size")
    ap.add_argument("--size", type=int, default=224, help="output size")
    ap.add_argument("--no-dali", action="store_true", help="skip the DALI contestants")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    if args.n <= 0 or args.rounds <= 0 or args.batch_size <= 0 or args.warmup_rounds < 0:
        ap.error("--n, --rounds and --batch-size must be positive, --warmup-rounds >= 0")

    torch.set_num_threads(1)  # each kernel call resizes on one core; threads come from our pools
    folder, source = photo_source(args.root, args.n, log)
    rec = recipe.imagenet_train(args.size)
    payloads = [open(source.ref(i).location, "rb").read() for i in range(len(source))]
    log.info("%d JPEGs, %.1f KB each on average", len(payloads), sum(map(len, payloads)) / len(payloads) / 1024)

    have_dali = not args.no_dali
    if have_dali:
        try:
            import nvidia.dali  # noqa: F401
        except ImportError as exc:
            log.warning("DALI is not importable (%s); skipping the DALI contestants", exc)
            have_dali = False

    contestants: list[Contestant] = [KernelsLoop(source, rec)]
    if have_dali:
        contestants.append(DaliPipeline(folder, args.n, 1, args.batch_size, args.size))
    contestants.append(KernelsPool(source, rec, 2, args.batch_size))
    if have_dali:
        contestants.append(DaliPipeline(folder, args.n, 2, args.batch_size, args.size))
    contestants += [PillowReference(source, rec), PillowDecode(payloads), SimplejpegDecode(payloads)]
    order = [key(c) for c in contestants]

    env = environment()
    env["loadavg_start"] = os.getloadavg()
    per_round: dict[str, list[dict]] = {key(c): [] for c in contestants}
    t_start = time.perf_counter()
    try:
        for c in contestants:
            c.setup()
            c.warmup()
        log.info("set up %d contestants; %d untimed warm-up round(s), then %d timed rounds",
                 len(contestants), args.warmup_rounds, args.rounds)
        for rnd in range(-args.warmup_rounds, args.rounds):
            shift = rnd % len(contestants)  # rotate who goes first
            for c in contestants[shift:] + contestants[:shift]:
                r = time_round(c)
                if rnd < 0:  # warm-up: caches, allocator arenas, clocks; discarded
                    log.info("warm-up   %-22s %7.0f img/s (discarded)", key(c), r["images_per_s"])
                    continue
                per_round[key(c)].append(r)
                log.info("round %d/%d  %-22s %7.0f img/s  (CPU util %.2f, other load %s)", rnd + 1,
                         args.rounds, key(c), r["images_per_s"], r["cpu_util"], fmt(r["other_load"], ".2f"))
    finally:
        for c in contestants:
            c.close()
    env["loadavg_end"] = os.getloadavg()
    log.info("done in %.1f s", time.perf_counter() - t_start)

    results = {key(c): summarize(per_round[key(c)], c.threads) for c in contestants}
    ratios = {
        "kernels / DALI, 1 thread": ratio(results, "kernels/1t", "dali/1t"),
        "kernels / DALI, 2 threads": ratio(results, "kernels/2t", "dali/2t"),
        "kernels / DALI per CPU-second, 1 thread": ratio(results, "kernels/1t", "dali/1t", "images_per_cpu_s"),
        "kernels / DALI per CPU-second, 2 threads": ratio(results, "kernels/2t", "dali/2t", "images_per_cpu_s"),
        "kernels / pillow-ref, 1 thread": ratio(results, "kernels/1t", "pillow-ref/1t"),
        "simplejpeg / Pillow decode, 1 thread": ratio(results, "simplejpeg-decode/1t", "pillow-decode/1t"),
        "kernels 2 threads / 1 thread": ratio(results, "kernels/2t", "kernels/1t"),
        "DALI 2 threads / 1 thread": ratio(results, "dali/2t", "dali/1t"),
    }
    goal = {}
    for label, name in (("1 thread", "kernels / DALI, 1 thread"), ("2 threads", "kernels / DALI, 2 threads")):
        r = ratios[name]
        goal[f"kernels >= {GOAL_KERNELS_OVER_DALI:.1f}x DALI at {label}"] = (
            None if r is None else r["of_medians"] >= GOAL_KERNELS_OVER_DALI)

    sys.stdout.write(report(args, env, results, ratios, goal, order))
    sys.stdout.flush()
    if args.out:
        doc = {"benchmark": "bench_kernels", "config": {k: (str(v) if isinstance(v, Path) else v)
                                                        for k, v in vars(args).items()},
               "dataset": str(folder), "environment": env, "contestants": results, "ratios": ratios,
               "goal": goal}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
