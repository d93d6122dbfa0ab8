"""The demo's photo folder: never written into a directory it did not make; regenerated when
its arguments change."""

import subprocess
import sys

import pytest

from hybridload.cli.demo_data import MARKER, make_photo_folder
from hybridload.sources import ImageFolder


def test_a_users_directory_is_never_written_into(tmp_path):
    user = tmp_path / "mine"
    (user / "cats").mkdir(parents=True)
    (user / "cats" / "a.jpg").write_bytes(b"x")
    with pytest.raises(ValueError, match="was not made by hybridload"):
        make_photo_folder(user, 8)
    assert sorted(p.name for p in user.rglob("*")) == ["a.jpg", "cats"]


def test_the_demo_command_refuses_an_existing_dataset_with_a_message(tmp_path):
    user = tmp_path / "mine"
    (user / "cats").mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-m", "hybridload", "demo", "--data", str(user), "--images", "8"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "was not made by hybridload" in proc.stderr
    assert [p.name for p in user.iterdir()] == ["cats"]


def test_a_changed_image_count_regenerates_the_folder(tmp_path):
    root = tmp_path / "d"
    make_photo_folder(root, 8, num_classes=4)
    assert len(ImageFolder(root)) == 8 and (root / MARKER).exists()
    make_photo_folder(root, 6, num_classes=2)
    src = ImageFolder(root)
    assert len(src) == 6 and src.classes == ["class_000", "class_001"]
    make_photo_folder(tmp_path / "empty-ok", 2, num_classes=1)  # an empty directory is fine too


def test_without_scikit_image_photo_like_jpegs_are_drawn_in_every_subsampling(tmp_path, monkeypatch):
    import io

    from PIL import Image, JpegImagePlugin

    from hybridload.cli import demo_data
    from hybridload._extras import MissingExtraError

    def no_skimage():
        raise MissingExtraError("generating a photo dataset needs scikit-image, which is not installed")

    monkeypatch.setattr(demo_data, "_load_photos", no_skimage)
    images = demo_data.make_photo_images(6, seed=3)
    assert images == demo_data.make_photo_images(6, seed=3)  # deterministic
    samplings, sizes = set(), set()
    for data in images:
        with Image.open(io.BytesIO(data)) as im:
            samplings.add(JpegImagePlugin.get_sampling(im))
            sizes.add(im.size)
            assert 350 <= min(im.size) <= 400 and im.mode == "RGB"
            px = __import__("numpy").asarray(im.convert("RGB"), dtype=float)
            assert 10 < px.std() < 120  # neither flat nor noise-like
    assert samplings == {0, 1, 2} and len(sizes) > 1  # 4:4:4, 4:2:2, 4:2:0
    monkeypatch.setattr(demo_data, "_have_skimage", lambda: False)
    root = demo_data.make_photo_folder(tmp_path / "d", 6, num_classes=2)
    assert len(ImageFolder(root)) == 6 and (root / MARKER).read_text() == "6 2 0 drawn"  # not reused as photos
