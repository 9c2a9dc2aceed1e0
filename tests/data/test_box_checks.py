"""Boxes outside the image, inverted boxes and images without regions: errors naming file and image, or a
logged clamp of sub-pixel overshoot — never silence."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from torch.utils.data import DataLoader, Dataset

import vlattn.data.features.checks as checks
from vlattn.data.features import RegionFeatures, open_store, write_m2_hdf5, write_memmap, write_npz_dir
from vlattn.errors import DataError

WRITERS = {"m2-hdf5": write_m2_hdf5, "npz-dir": write_npz_dir, "memmap": write_memmap}


def store_with(tmp_path: Path, fmt: str, boxes: list[list[float]], width: int = 40, height: int = 30):
    """A store whose image 5 has ``boxes`` (image 1 is fine); opened for reading."""
    good = RegionFeatures(np.ones((1, 4), np.float32), np.array([[0, 0, 10, 10]], np.float32), width, height)
    bad = RegionFeatures(np.ones((len(boxes), 4), np.float32), np.array(boxes, np.float32).reshape(-1, 4), width, height)
    path = tmp_path / ("store.h5" if fmt == "m2-hdf5" else "store")
    WRITERS[fmt](path, [(1, good), (5, bad)])
    return open_store(path, dim=4)


@pytest.mark.parametrize("fmt", WRITERS)
def test_image_without_regions(tmp_path: Path, fmt: str) -> None:
    store = store_with(tmp_path, fmt, [])
    with pytest.raises(DataError, match="no regions") as err:
        store.get(5)
    assert "store" in str(err.value) and "item 5" in str(err.value)
    assert store.get(1).num_regions == 1


@pytest.mark.parametrize("fmt", WRITERS)
def test_inverted_box(tmp_path: Path, fmt: str) -> None:
    store = store_with(tmp_path, fmt, [[0, 0, 10, 10], [20, 5, 12, 9]])  # x2 < x1 (an x, y, w, h box)
    with pytest.raises(DataError, match=r"box 1 \(20, 5, 12, 9\) is inverted") as err:
        store.get(5)
    assert "item 5" in str(err.value)


@pytest.mark.parametrize("fmt", WRITERS)
@pytest.mark.parametrize("box", [[0, 0, 45, 10], [0, 0, 10, 32], [-3, 0, 10, 10]])
def test_box_outside_the_image(tmp_path: Path, fmt: str, box: list[float]) -> None:
    store = store_with(tmp_path, fmt, [box], width=40, height=30)
    with pytest.raises(DataError, match="outside the 40x30 image") as err:
        store.get(5)
    assert "item 5" in str(err.value) and "box 0" in str(err.value)


def test_sub_pixel_overshoot_is_clamped_and_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = store_with(tmp_path, "memmap", [[-0.5, 0, 40.75, 30.5], [1, 1, 5, 5]], width=40, height=30)
    with caplog.at_level(logging.WARNING, logger="vlattn.data"):
        first = store.get(5)
        store.get(5)
    assert first.boxes.tolist() == [[0, 0, 40, 30], [1, 1, 5, 5]]
    warnings = [r for r in caplog.records if "clamped" in r.getMessage()]
    assert len(warnings) == 1 and "0.75 px outside the 40x30 image" in warnings[0].getMessage()


class ReadsImage5(Dataset):
    """Eight items, each reading image 5 of ``store``."""

    def __init__(self, store) -> None:
        self.store = store

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> list[list[float]]:
        return self.store.get(5).boxes.tolist()


def test_clamping_is_reported_once_across_dataloader_workers_and_epochs(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Workers are forked anew each epoch, as the training loop makes them; each reads the clamped image."""
    store = store_with(tmp_path, "memmap", [[-0.5, 0, 40.75, 30.5], [1, 1, 5, 5]], width=40, height=30)
    logger, handler = logging.getLogger("vlattn.data"), logging.StreamHandler(sys.stderr)  # fd 2: the workers' too
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        for _ in range(2):
            loader = DataLoader(ReadsImage5(store), batch_size=2, num_workers=2, collate_fn=list,
                                multiprocessing_context="fork")
            assert [boxes for batch in loader for boxes in batch] == [[[0, 0, 40, 30], [1, 1, 5, 5]]] * 8
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert capfd.readouterr().err.count("clamped to the image") == 1


class HeldLock:
    """A lock a killed process left held: every ``acquire`` times out (after recording its timeout)."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def acquire(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        return False


def test_a_lock_left_held_costs_one_bounded_wait_and_the_clamp_is_still_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = HeldLock()
    monkeypatch.setattr(checks, "_CLAMP_LOCK", lock)
    store = store_with(tmp_path, "memmap", [[0, 0, 40.5, 30]], width=40, height=30)
    with caplog.at_level(logging.WARNING, logger="vlattn.data"):
        for _ in range(3):
            assert store.get(5).boxes.tolist() == [[0, 0, 40, 30]]
    assert lock.timeouts == [1.0]  # waited once, bounded; then this process's own reports decide
    assert sum("clamped" in r.getMessage() for r in caplog.records) == 1


def test_m2_file_without_sizes_checks_negative_coordinates(tmp_path: Path) -> None:
    """M2's files store no image size (it is taken from the boxes), so only boxes left of/above 0 can be wrong."""
    with h5py.File(tmp_path / "m2.h5", "w") as handle:
        handle["3_features"] = np.ones((2, 4), np.float32)
        handle["3_boxes"] = np.array([[-5, 0, 10, 10], [0, 0, 300, 200]], np.float32)
    with pytest.raises(DataError, match="5 px outside the 300x200 image"):
        open_store(tmp_path / "m2.h5").get(3)

