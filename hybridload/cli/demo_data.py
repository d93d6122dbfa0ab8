"""Photo-like datasets for the demo, tests and benchmarks: crops of the photographs scikit-image
(and scikit-learn) ship, re-encoded at ImageNet-like size, since random-noise JPEGs decode far
slower and mislead every figure; without scikit-image, drawn photo-like images
(`synthetic_photo`) cycling the JPEG chroma subsamplings."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from hybridload._extras import MissingExtraError, require

log = logging.getLogger(__name__)

_SKIMAGE_PHOTOS = (
    "astronaut.png",
    "chelsea.png",
    "coffee.png",
    "hubble_deep_field.jpg",
    "ihc.png",
    "motorcycle_left.png",
    "motorcycle_right.png",
    "retina.jpg",
    "rocket.jpg",
    "camera.png",
    "moon.png",
    "brick.png",
    "grass.png",
)


def _have_skimage() -> bool:
    return importlib.util.find_spec("skimage") is not None


def _photo_paths() -> list[Path]:
    paths: list[Path] = []
    skimage = require("skimage", "photos", "generating a photo dataset", package="scikit-image")
    data = Path(skimage.__path__[0]) / "data"
    paths += [data / name for name in _SKIMAGE_PHOTOS if (data / name).exists()]
    try:
        import sklearn

        imgs = Path(sklearn.__file__).parent / "datasets" / "images"
        paths += sorted(imgs.glob("*.jpg"))
    except ImportError:
        pass
    if not paths:
        raise RuntimeError("no photographs found inside the installed scikit-image")
    return paths


def _load_photos() -> list[Image.Image]:
    photos = []
    for p in _photo_paths():
        with Image.open(p) as im:
            photos.append(im.convert("RGB"))
    return photos


def make_photo_images(
    n: int, seed: int = 0, short_side: tuple[int, int] = (350, 400), quality: tuple[int, int] = (80, 95)
) -> list[bytes]:
    """Return ``n`` JPEG-encoded photo crops as bytes (deterministic for a seed)."""
    import io

    rng = np.random.default_rng(seed)
    try:
        photos = _load_photos()
    except MissingExtraError as exc:
        log.info("%s; drawing photo-like images instead", exc)
        return synthetic_photo_images(n, seed=seed, short_side=short_side, quality=quality)
    out = []
    for i in range(n):
        src = photos[i % len(photos)]
        w, h = src.size
        frac = rng.uniform(0.6, 1.0)
        cw, ch = max(16, int(w * frac)), max(16, int(h * frac * rng.uniform(0.8, 1.2)))
        cw, ch = min(cw, w), min(ch, h)
        x0 = int(rng.integers(0, w - cw + 1))
        y0 = int(rng.integers(0, h - ch + 1))
        crop = src.crop((x0, y0, x0 + cw, y0 + ch))
        target = int(rng.integers(short_side[0], short_side[1] + 1))
        scale = target / min(cw, ch)
        crop = crop.resize((max(1, round(cw * scale)), max(1, round(ch * scale))), Image.Resampling.BICUBIC)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        buf = io.BytesIO()
        crop.save(buf, format="JPEG", quality=int(rng.integers(quality[0], quality[1] + 1)))
        out.append(buf.getvalue())
    return out


SUBSAMPLINGS = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}  # Pillow's ``subsampling`` codes


def synthetic_photo(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """An HxWx3 uint8 photo-like image: gradient + blobs + blurred shapes + texture + noise."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    yy, xx = yy / h, xx / w
    corners = rng.uniform(20, 235, (4, 3)).astype(np.float32)
    img = (
        corners[0] * ((1 - yy) * (1 - xx))[..., None]
        + corners[1] * ((1 - yy) * xx)[..., None]
        + corners[2] * (yy * (1 - xx))[..., None]
        + corners[3] * (yy * xx)[..., None]
    )
    for _ in range(int(rng.integers(2, 6))):  # soft light and shadow
        cy, cx, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.08, 0.4)
        g = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
        img += g[..., None] * rng.uniform(-80, 80, 3).astype(np.float32)
    canvas = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(canvas)
    for _ in range(int(rng.integers(3, 9))):  # objects with edges
        x0, y0 = int(rng.integers(0, w - 8)), int(rng.integers(0, h - 8))
        x1, y1 = x0 + int(rng.integers(8, max(9, w // 2))), y0 + int(rng.integers(8, max(9, h // 2)))
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        shape = int(rng.integers(0, 3))
        if shape == 0:
            draw.ellipse((x0, y0, x1, y1), fill=fill)
        elif shape == 1:
            draw.rectangle((x0, y0, x1, y1), fill=fill)
        else:
            pts = [(int(rng.integers(0, w)), int(rng.integers(0, h))) for _ in range(int(rng.integers(3, 6)))]
            draw.polygon(pts, fill=fill)
    img = np.asarray(canvas.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.6, 2.0)))), dtype=np.float32)
    th, tw = int(rng.integers(h // 6, h // 2)), int(rng.integers(w // 6, w // 2))  # a textured patch
    ty, tx = int(rng.integers(0, h - th)), int(rng.integers(0, w - tw))
    f = rng.uniform(0.2, 0.9)
    img[ty : ty + th, tx : tx + tw] += 25 * np.sin(f * xx[:th, :tw] * w + 0.7 * f * yy[:th, :tw] * h)[..., None]
    img += rng.normal(0, rng.uniform(2, 6), img.shape).astype(np.float32)  # sensor noise
    return np.clip(img, 0, 255).astype(np.uint8)


def synthetic_photo_images(
    n: int, seed: int = 0, short_side: tuple[int, int] = (350, 400), quality: tuple[int, int] = (80, 95)
) -> list[bytes]:
    """``n`` JPEGs of `synthetic_photo` (deterministic for a seed); subsampling cycles 4:4:4, 4:2:2, 4:2:0."""
    import io

    rng = np.random.default_rng(seed)
    codes = list(SUBSAMPLINGS.values())
    out = []
    for i in range(n):
        short = int(rng.integers(short_side[0], short_side[1] + 1))
        long = int(short * rng.uniform(1.0, 1.4))
        h, w = (short, long) if rng.random() < 0.7 else (long, short)
        buf = io.BytesIO()
        Image.fromarray(synthetic_photo(rng, h, w)).save(
            buf, format="JPEG", quality=int(rng.integers(quality[0], quality[1] + 1)), subsampling=codes[i % 3]
        )
        out.append(buf.getvalue())
    return out


MARKER = ".hybridload-photos"


def make_photo_folder(root: str | os.PathLike, n: int, num_classes: int = 4, seed: int = 0) -> Path:
    """Write an ImageFolder tree ``root/class_k/img_i.jpg`` of ``n`` photo JPEGs.

    A tree this function made (it holds the marker file ``.hybridload-photos``, written
    before any image) is reused when made with the same arguments and regenerated when
    they differ. It never writes into an existing, non-empty directory without the marker
    (a user's dataset): ValueError naming it.
    """
    if n <= 0 or num_classes <= 0:
        raise ValueError(f"make_photo_folder: n and num_classes must be positive, got {n}, {num_classes}")
    root = Path(root)
    marker = root / MARKER
    key = f"{n} {num_classes} {seed}"
    if not _have_skimage():  # drawn, not photographed: never mistaken for the photos
        key += " drawn"
    if marker.exists() and marker.read_text() == key:
        return root
    if root.exists() and not marker.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ValueError(
            f"make_photo_folder: {str(root)!r} already exists and was not made by hybridload "
            f"(no {MARKER} file); give a new or empty directory (e.g. --data data/demo-photos)"
        )
    if marker.exists():  # ours, made with other arguments: remove what we wrote
        for d in root.glob("class_*"):
            if d.is_dir():
                shutil.rmtree(d)
    root.mkdir(parents=True, exist_ok=True)
    marker.write_text("incomplete")
    images = make_photo_images(n, seed=seed)
    for i, data in enumerate(images):
        d = root / f"class_{i % num_classes:03d}"
        d.mkdir(exist_ok=True)
        (d / f"img_{i:06d}.jpg").write_bytes(data)
    marker.write_text(key)
    log.info("wrote %d photo JPEGs in %d classes under %s", n, num_classes, root)
    return root
