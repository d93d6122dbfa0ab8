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
    proc = subprocess.run([sys.executable, "-m", "hybridload", "demo", "--data", str(user), "--images", "8"],
                          capture_output=True, text=True, timeout=120)
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
