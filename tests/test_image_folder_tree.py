"""ImageFolder on odd trees: symlink loops are not followed twice; empty or unreadable class
folders are refused, naming them."""

import os
import shutil

import pytest

from hybridload import sources


def tree(root, bad_files, classes):
    for c, n in classes.items():
        (root / c).mkdir(parents=True)
        for k in range(n):
            shutil.copy(bad_files["good"], root / c / f"{k}.jpg")
    return root


def test_a_symlink_loop_is_not_followed_and_labels_stay_put(tmp_path, bad_files):
    root = tree(tmp_path / "d", bad_files, {"a": 2, "b": 3})
    os.symlink(root, root / "a" / "loop")  # a -> the root: would relabel b's images as a
    os.symlink(root / "a", root / "a" / "self")  # a -> itself
    src = sources.ImageFolder(root)
    labels = [src.ref(i).label for i in range(len(src))]
    assert labels == [0, 0, 1, 1, 1]


def test_a_followed_symlinked_class_folder_still_counts(tmp_path, bad_files):
    store = tree(tmp_path / "store", bad_files, {"x": 2})
    root = tree(tmp_path / "d", bad_files, {"a": 1})
    os.symlink(store / "x", root / "b")
    assert len(sources.ImageFolder(root)) == 3


def test_an_empty_class_folder_is_refused_naming_it(tmp_path, bad_files):
    root = tree(tmp_path / "d", bad_files, {"a": 2, "b": 0, "c": 1})
    (root / "b" / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="Found no valid file for the classes b"):
        sources.ImageFolder(root)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads folders whatever their permissions")
def test_an_unreadable_class_folder_is_refused_naming_it(tmp_path, bad_files):
    root = tree(tmp_path / "d", bad_files, {"a": 2, "b": 1})
    os.chmod(root / "b", 0)
    try:
        with pytest.raises(PermissionError, match="cannot list"):
            sources.ImageFolder(root)
    finally:
        os.chmod(root / "b", 0o755)
