"""Photometric kernels against DALI's CPU operator for each, one thread, on decoded images.

Every contestant processes the same decoded, centre-cropped HWC uint8 images with per-image
values drawn once (the same for both sides); DALI runs ``device_id=None``, one thread,
fed through external_source (the copy in is part of its cost, as in the GPU lane). Each
side runs once in ``setup`` (untimed), so a run without warm-up rounds times warm code.
Kernels: ``_kernels/photometric.py`` (per image) and ``_kernels/erase.py`` (per batch, on the
normalized float batch). DALI: fn.brightness, fn.contrast, fn.saturation, fn.hue,
fn.color_twist (all four), fn.color_space_conversion (GRAY, then 3 channels as the kernel's),
fn.gaussian_blur, fn.erase; see :data:`NOTE` for where DALI's operator does another job.
"""

from __future__ import annotations

import numpy as np
import torch

import _harness as h
from hybridload.recipe import _ops as O
from hybridload import recipe
from hybridload._kernels import photometric as P
from hybridload._kernels.erase import erase_batch

BLUR_K = 23
#: The per-image values each DALI graph takes (DALI drops the unused inputs).
USES = {
    "brightness": ("b",),
    "contrast": ("c",),
    "contrast-mean": ("c",),
    "saturation": ("s",),
    "hue": ("h",),
    "colorjitter": ("b", "c", "s", "h"),
    "colorjitter-ops": ("b", "c", "s", "h"),
    "grayscale": (),
    "blur": ("sigma",),
    "erase": (),
}
NOTE = (
    "Photometric rows: the same decoded, centre-cropped --size images and per-image values on both sides, "
    "one thread each (torch.set_num_threads(1); DALI CPU-only, num_threads=1), each side warmed up once "
    "untimed. Where DALI's operator does another job: fn.contrast blends around a fixed 128 by default, the "
    "kernel around the image's mean grey level (torchvision's), so `contrast-mean` gives DALI that job too "
    "(contrast_center = fn.reductions.mean of its GRAY conversion, per sample); fn.saturation, fn.hue and "
    "fn.color_twist (`colorjitter`, all four in one op) apply one 3 x 3 colour matrix per image (hue a "
    "rotation in YIQ, an approximation of torchvision's HSV hue), while the kernel runs torchvision's "
    "formulas, each adjustment in turn; `colorjitter-ops` chains fn.brightness, the mean-centred "
    "fn.contrast, fn.saturation and fn.hue, the kernel's order. A run of colour ops that mixes channels per "
    "pixel (saturation, hue, grayscale, blur) returns an HWC view of planar memory, which the default "
    "CHW layout then copies as it is (an HWC-layout recipe transposes it there)."
)
ERASE = recipe.RandomErasing(p=1.0)


def _values(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    return {
        "b": g.uniform(0.6, 1.4, n),
        "c": g.uniform(0.6, 1.4, n),
        "s": g.uniform(0.6, 1.4, n),
        "h": g.uniform(-0.1, 0.1, n),
        "sigma": g.uniform(0.1, 2.0, n),
    }


def _kernel_ops(v: dict, k: int) -> dict[str, list]:
    cj = [O.Brightness(v["b"][k]), O.Contrast(v["c"][k]), O.Saturation(v["s"][k]), O.Hue(v["h"][k])]
    return {
        "brightness": cj[:1],
        "contrast": cj[1:2],
        "contrast-mean": cj[1:2],
        "saturation": cj[2:3],
        "hue": cj[3:],
        "colorjitter": cj,
        "colorjitter-ops": cj,
        "grayscale": [O.Grayscale(True)],
        "blur": [O.Blur(BLUR_K, v["sigma"][k])],
    }


class KernelOp(h.Contestant):
    def __init__(self, name: str, images: list[np.ndarray], values: dict):
        self.name, self.op = f"{name}/kernel", name
        self.images = [torch.from_numpy(a) for a in images]
        self.ops = [_kernel_ops(values, k)[name] for k in range(len(images))]

    def setup(self) -> None:
        self.run(h.warmup_epoch(-1))  # untimed: warm code for a run without warm-up rounds

    def run(self, epoch: int) -> int:
        for img, ops in zip(self.images, self.ops):
            P.apply_photometric(img, ops)  # as kernels.geometry.apply_ops runs a recipe's colour ops
        return len(self.images)


class KernelErase(h.Contestant):
    name = "erase/kernel"

    def __init__(self, images: list[np.ndarray], batch_size: int):
        chw = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float()
        self.batches = list(torch.split(chw, batch_size))

    def setup(self) -> None:
        self.run(h.warmup_epoch(-1))  # untimed: warm code for a run without warm-up rounds

    def run(self, epoch: int) -> int:
        for k, b in enumerate(self.batches):
            erase_batch(b, ERASE, "CHW", 0, epoch, range(k * len(b), (k + 1) * len(b)))
        return sum(len(b) for b in self.batches)


class DaliOp(h.Contestant):
    """DALI's CPU operator for ``op`` over the images, batch by batch, one thread."""

    def __init__(self, name: str, images: list[np.ndarray], values: dict, batch_size: int):
        self.name, self.op, self.images, self.values, self.batch_size = f"{name}/dali", name, images, values, batch_size
        self._pipe = None

    def setup(self) -> None:
        from nvidia.dali import fn, pipeline_def, types

        op = self.op

        def mean_contrast(img, c):  # the kernel's job: blend around the image's mean grey level
            grey = fn.color_space_conversion(img, image_type=types.RGB, output_type=types.GRAY)
            return fn.contrast(img, contrast=c, contrast_center=fn.reductions.mean(grey))

        @pipeline_def(
            batch_size=self.batch_size, num_threads=1, device_id=None, prefetch_queue_depth=1, exec_dynamic=True
        )
        def graph():
            img = fn.external_source(name="image", dtype=types.UINT8, ndim=3, layout="HWC")
            v = {k: fn.external_source(name=k, dtype=types.FLOAT, ndim=0) for k in ("b", "c", "s", "h", "sigma")}
            if op == "brightness":
                return fn.brightness(img, brightness=v["b"])
            if op == "contrast":
                return fn.contrast(img, contrast=v["c"])
            if op == "contrast-mean":
                return mean_contrast(img, v["c"])
            if op == "saturation":
                return fn.saturation(img, saturation=v["s"])
            if op == "hue":
                return fn.hue(img, hue=v["h"] * 360.0)
            if op == "colorjitter":
                return fn.color_twist(img, brightness=v["b"], contrast=v["c"], saturation=v["s"], hue=v["h"] * 360.0)
            if op == "colorjitter-ops":
                x = mean_contrast(fn.brightness(img, brightness=v["b"]), v["c"])
                return fn.hue(fn.saturation(x, saturation=v["s"]), hue=v["h"] * 360.0)
            if op == "grayscale":
                grey = fn.color_space_conversion(img, image_type=types.RGB, output_type=types.GRAY)
                return fn.cat(grey, grey, grey, axis=2)  # the same 3-channel output as the kernel
            if op == "blur":
                return fn.gaussian_blur(img, window_size=BLUR_K, sigma=v["sigma"])
            shape = fn.external_source(name="shape", dtype=types.FLOAT, ndim=1)
            anchor = fn.external_source(name="anchor", dtype=types.FLOAT, ndim=1)
            return fn.erase(
                fn.cast(img, dtype=types.FLOAT), anchor=anchor, shape=shape, axis_names="HW", fill_value=0.0
            )

        self._pipe = graph()
        self._pipe.build()
        self.run(h.warmup_epoch(-1))  # untimed: warm code for a run without warm-up rounds

    def run(self, epoch: int) -> int:
        n, bs = len(self.images), self.batch_size
        done = 0
        for start in range(0, n - bs + 1, bs):
            self._pipe.feed_input("image", self.images[start : start + bs])
            for k in USES[self.op]:
                self._pipe.feed_input(k, [np.float32(x) for x in self.values[k][start : start + bs]])
            if self.op == "erase":
                hw = self.images[0].shape[:2]
                boxes = [ERASE.draw(hw, np.random.default_rng((epoch, start + j))) or (0, 0, 1, 1) for j in range(bs)]
                self._pipe.feed_input("anchor", [np.float32(b[:2]) for b in boxes])
                self._pipe.feed_input("shape", [np.float32(b[2:]) for b in boxes])
            self._pipe.run()
            done += bs
        return done

    def close(self) -> None:
        self._pipe = None


NAMES = tuple(USES)
RATIOS = {f"{n} kernel / DALI, 1 thread": (f"{n}/kernel", f"{n}/dali", "images_per_s") for n in NAMES}
GOALS = {k: 1.0 for k in RATIOS}
RATIOS.update({f"{n} kernel / DALI per CPU-second": (f"{n}/kernel", f"{n}/dali", "images_per_cpu_s") for n in NAMES})


def photo_contestants(images: list[np.ndarray], batch_size: int, dali: bool) -> list[h.Contestant]:
    """Each op's kernel and (when ``dali``) DALI's operator, side by side."""
    values = _values(len(images))
    batch_size = min(batch_size, len(images))
    images = images[: len(images) // batch_size * batch_size]  # whole batches for both sides
    out: list[h.Contestant] = []
    for name in NAMES:
        out.append(KernelErase(images, batch_size) if name == "erase" else KernelOp(name, images, values))
        if dali:
            out.append(DaliOp(name, images, values, batch_size))
    return out
