"""Shared fixtures: small photo datasets and bad inputs, made once per session."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from PIL import Image

from hybridload.datasets import make_photo_folder

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="session")
def ray_cluster():
    """A simulated 3-node Ray cluster on loopback, shared by every test that asks for it:
    (cluster, [worker nodes]); the driver is connected to the head (the trainer's node)."""
    from ray_fixtures import three_node_cluster
    with three_node_cluster(head_cpus=2, worker_cpus=1) as c:
        yield c


@pytest.fixture(scope="session")
def photo_root(tmp_path_factory):
    """An ImageFolder tree of 60 photo JPEGs in 3 classes."""
    return str(make_photo_folder(tmp_path_factory.mktemp("photos"), 60, num_classes=3, seed=1))


@pytest.fixture(scope="session")
def bad_files(tmp_path_factory, photo_root):
    """Named bad inputs next to one good JPEG: {kind: path}."""
    root = tmp_path_factory.mktemp("bad")
    good = sorted(p for d, _, fs in os.walk(photo_root) for p in (os.path.join(d, f) for f in fs)
                  if p.endswith(".jpg"))[0]
    data = open(good, "rb").read()
    files = {"good": good}

    def put(name, payload):
        p = root / name
        p.write_bytes(payload)
        files[name.split(".")[0]] = str(p)

    put("truncated.jpg", data[: len(data) // 3])
    put("zero.jpg", b"")
    put("text.jpg", b"this is not an image, just some text\n" * 20)
    corrupt = bytearray(data)
    corrupt[len(corrupt) // 2: len(corrupt) // 2 + 400] = os.urandom(400)
    put("corrupt.jpg", bytes(corrupt))
    files["missing"] = str(root / "does-not-exist.jpg")
    img = Image.open(io.BytesIO(data)).convert("RGB")
    buf = io.BytesIO(); img.save(buf, format="PNG"); put("png.png", buf.getvalue())
    buf = io.BytesIO(); img.convert("L").save(buf, format="JPEG"); put("gray.jpg", buf.getvalue())
    buf = io.BytesIO(); img.convert("CMYK").save(buf, format="JPEG"); put("cmyk.jpg", buf.getvalue())
    arr16 = (np.asarray(img.convert("L"), dtype=np.uint16) * 257)
    buf = io.BytesIO(); Image.fromarray(arr16).save(buf, format="PNG"); put("gray16.png", buf.getvalue())
    return files
