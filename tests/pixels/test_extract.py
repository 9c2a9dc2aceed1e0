"""``vlattn features extract`` around the extractor: unreadable images named and counted (or refused with
--strict), resuming a store of the same extractor, refusing another's, Ctrl-C keeping what is done, all layouts."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from vlattn.data.features import open_store
from vlattn.data.features.record import store_extractor
from vlattn.pixels.extract import extract_images
from vlattn.pixels.images import list_images
from vlattn.pixels.registry import build_extractor
from vlattn.pixels.weights import WeightSource


@pytest.fixture
def folder(photos: Path, tmp_path: Path) -> Path:
    """Six of the photos and a damaged file."""
    chosen = tmp_path / "in"
    chosen.mkdir()
    for name in ("photo_1.jpg", "photo_2.png", "photo_3.jpg", "photo_4.png", "photo_5.jpg", "photo_6.png"):
        shutil.copy(photos / name, chosen / name)
    (chosen / "photo_9.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    return chosen


@pytest.fixture
def extract(vlattn_cli, synth_set: Path):
    """``vlattn features extract`` of a folder with the synthetic set's extractor on a 2 x 2 grid."""

    def run(folder: Path, out: Path, *extra: str) -> tuple[int, str, str]:
        return vlattn_cli("features", "extract", "--images", str(folder), "--out", str(out), "--extractor", "synth",
                          "--weights", str(synth_set), "--set", "grid=2", "--no-progress", "--batch", "2", "--device",
                          "cpu", *extra)

    return run


def test_an_unreadable_image_is_named_counted_and_skipped(folder: Path, tmp_path: Path, extract) -> None:
    code, stdout, stderr = extract(folder, tmp_path / "out")
    assert code == 0, stderr
    assert f"skipped {folder / 'photo_9.png'}: " in stderr
    assert "6 images (6 extracted, 0 already there, 1 failed)" in stdout
    assert open_store(tmp_path / "out").ids() == [1, 2, 3, 4, 5, 6]


def test_strict_refuses_the_run_and_writes_nothing(folder: Path, tmp_path: Path, extract) -> None:
    code, stdout, stderr = extract(folder, tmp_path / "out", "--strict")
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert str(folder / "photo_9.png") in stderr and "--strict: nothing written" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_resume_extracts_only_the_new_images(folder: Path, tmp_path: Path, extract) -> None:
    (folder / "photo_9.png").unlink()
    later = tmp_path / "later"
    later.mkdir()
    for name in ("photo_5.jpg", "photo_6.png"):
        shutil.move(folder / name, later / name)
    out = tmp_path / "out"
    assert extract(folder, out)[0] == 0
    first = {i: open_store(out).get(i).features.copy() for i in range(1, 5)}
    code, stdout, stderr = extract(folder, out, "--images", str(later))
    assert code == 0, stderr
    assert "6 images (2 extracted, 4 already there, 0 failed)" in stdout
    store = open_store(out)
    assert store.ids() == [1, 2, 3, 4, 5, 6]
    for image_id, features in first.items():
        np.testing.assert_array_equal(store.get(image_id).features, features)
    code, stdout, _ = extract(folder, out, "--images", str(later))
    assert "6 images (0 extracted, 6 already there, 0 failed)" in stdout
    # another setting is another extractor: refused, the store kept
    code, stdout, stderr = extract(folder, out, "--set", "grid=3")
    assert code == 2 and "resuming needs the same extractor, weights and settings" in stderr
    assert open_store(out).ids() == [1, 2, 3, 4, 5, 6]
    code, _, stderr = extract(folder, out, "--format", "npz-dir")
    assert code == 2 and "holds a memmap store, not npz-dir" in stderr


def test_a_directory_vlattn_did_not_write_is_refused(folder: Path, tmp_path: Path, extract) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    code, _, stderr = extract(folder, mine)
    assert code == 2 and stderr.count("\n") == 1
    assert (mine / "notes.txt").read_text() == "keep me"


def test_ctrl_c_keeps_the_images_done(folder: Path, tmp_path: Path, synth_set: Path) -> None:
    (folder / "photo_9.png").unlink()
    extractor = build_extractor("synth", WeightSource("file", path=synth_set), {"grid": 2}, torch.device("cpu"))
    calls = {"n": 0}

    def interrupted(images):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return extractor(images)

    interrupted.name, interrupted.dim, interrupted.max_side = extractor.name, extractor.dim, extractor.max_side
    interrupted.record = extractor.record
    report = extract_images(list_images([folder]), tmp_path / "out", interrupted, batch=2, workers=0)
    assert report.interrupted and report.extracted == 2 and open_store(tmp_path / "out").ids() == [1, 2]
    report = extract_images(list_images([folder]), tmp_path / "out", extractor, batch=2)
    assert not report.interrupted and (report.kept, report.extracted) == (2, 4)


@pytest.mark.parametrize("format", ["memmap", "npz-dir", "m2-hdf5"])
def test_every_layout_records_the_extractor_and_keeps_detections(photos: Path, tmp_path: Path, format: str) -> None:
    extractor = build_extractor("regions", WeightSource("random", seed=0),
                                {"min_size": 48, "max_size": 48, "min_boxes": 2, "max_boxes": 4}, torch.device("cpu"))
    files = [f for f in list_images([photos]) if f[0] <= 3]
    out = tmp_path / ("out.h5" if format == "m2-hdf5" else "out")
    extract_images(files, out, extractor, format=format, batch=2)
    record = store_extractor(out)
    assert record["name"] == "regions" and record["weights"]["sha256"] == extractor.sha256
    store = open_store(out)
    classes, scores = store.detections(2)
    assert len(classes) == len(scores) == store.get(2).num_regions == 2
    if format == "m2-hdf5":
        with h5py.File(out) as handle:
            assert handle["2_classes"].shape == (2,)
    # resuming a layout carries the detections of the images already there
    extract_images(list_images([photos])[:4], out, extractor, format=format, batch=2)
    again = open_store(out)
    assert again.ids() == [1, 2, 3, 4]
    np.testing.assert_array_equal(again.detections(2)[0], classes)
