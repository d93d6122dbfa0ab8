"""TarShards on shards written by the real ``webdataset`` writer: the same samples and labels
as webdataset's own reader, and keys with dots refused as webdataset's ``to_tuple`` refuses them."""

import pytest

from hybridload import sources

wds = pytest.importorskip("webdataset")


@pytest.fixture(scope="module")
def images(photo_root):
    folder = sources.ImageFolder(photo_root)
    return [folder.read(folder.ref(i))[0] for i in range(6)]


def write_wds(path, samples):
    """samples: dicts for webdataset.TarWriter (``__key__`` plus extension -> value)."""
    with wds.TarWriter(str(path)) as sink:
        for sample in samples:
            sink.write(sample)
    return str(path)


def test_clean_keys_give_webdataset_readers_samples_and_labels(tmp_path, images):
    path = write_wds(
        tmp_path / "clean.tar",
        [
            {"__key__": f"n01/img_{i:03d}", "jpg": data, "cls": 10 + i, "json": {"i": i}}
            for i, data in enumerate(images)
        ],
    )
    theirs = list(wds.WebDataset(path, shardshuffle=False).to_tuple("__key__", "jpg", "cls"))
    tar = sources.TarShards(path)
    assert tar.keys() == [key for key, _, _ in theirs]
    assert [tar.read(tar.ref(i)) for i in range(len(tar))] == [(jpg, int(cls)) for _, jpg, cls in theirs]
    assert [tar.ref(i).label for i in range(len(tar))] == [10 + i for i in range(len(images))]


def test_keys_with_dots_are_an_error_naming_the_key_and_shard_as_in_webdataset(tmp_path, images):
    path = write_wds(
        tmp_path / "dotted.tar",
        [{"__key__": f"img.{i:03d}", "jpg": data, "cls": i} for i, data in enumerate(images[:4])],
    )
    with pytest.raises(ValueError):  # the reference: webdataset's own pipeline refuses these samples
        list(wds.WebDataset(path, shardshuffle=False).to_tuple("jpg", "cls"))
    with pytest.raises(
        ValueError,
        match=r"dotted\.tar', key 'img' groups the members img\.000\.cls, "
        r"img\.000\.jpg, img\.001\.cls.*keys without dots \(e\.g\. 'img_000'\)",
    ):
        sources.TarShards(path)
    with pytest.raises(ValueError, match=r"key 'img' groups"):  # a label function does not hide the merge
        sources.TarShards(path, label=lambda key: 0)


def test_one_dotted_key_per_sample_would_lose_its_label_and_is_refused(tmp_path, images):
    path = write_wds(
        tmp_path / "one.tar",
        [{"__key__": f"{name}.000", "jpg": images[i], "cls": i} for i, name in enumerate(["a", "b"])],
    )
    with pytest.raises(
        ValueError,
        match=r"one\.tar', key 'a' groups the members a\.000\.cls, a\.000\.jpg.*"
        r"lose their \.cls label",
    ):
        sources.TarShards(path)


def test_several_images_in_one_sample_need_the_image_named_in_full(tmp_path, images):
    path = write_wds(
        tmp_path / "stereo.tar", [{"__key__": "pair", "left.jpg": images[0], "right.jpg": images[1], "cls": 4}]
    )
    with pytest.raises(
        ValueError,
        match=r"key 'pair' groups the members pair\.cls, pair\.left\.jpg, "
        r"pair\.right\.jpg.*"
        r"image_exts=\('left\.jpg',\)",
    ):
        sources.TarShards(path)
    for side, data in (("left", images[0]), ("right", images[1])):
        tar = sources.TarShards(path, image_exts=(f"{side}.jpg",))
        assert tar.read(tar.ref(0)) == (data, 4)
