"""Padding of region sets: a hand example and hypothesis properties."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vlattn.data.features.base import RegionFeatures
from vlattn.data.regions import pad_regions
from vlattn.errors import DataError


def regions(count: int, dim: int = 3, start: float = 1.0) -> RegionFeatures:
    features = start + np.arange(count * dim, dtype=np.float32).reshape(count, dim)
    boxes = np.tile(np.array([[1, 2, 3, 4]], dtype=np.float32), (count, 1)) * np.arange(1, count + 1)[:, None]
    return RegionFeatures(features, boxes.astype(np.float32), 40 + count, 30)


def test_hand_example() -> None:
    out = pad_regions([regions(1), regions(3)], max_regions=2)
    assert out["features"].shape == (2, 2, 3) and out["features"].dtype == torch.float32
    assert out["region_mask"].tolist() == [[True, False], [True, True]]
    assert out["features"][0].tolist() == [[1, 2, 3], [0, 0, 0]]
    assert out["features"][1].tolist() == [[1, 2, 3], [4, 5, 6]]  # third region dropped, first ones kept
    assert out["boxes"][1].tolist() == [[1, 2, 3, 4], [2, 4, 6, 8]]
    assert out["sizes"].tolist() == [[41, 30], [43, 30]]


def test_errors() -> None:
    with pytest.raises(DataError, match="empty batch"):
        pad_regions([], 5)
    with pytest.raises(DataError, match="different feature dimensions"):
        pad_regions([regions(2, dim=3), regions(2, dim=4)], 5)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=5), st.integers(1, 8))
def test_padding_properties(counts: list[int], max_regions: int) -> None:
    items = [regions(c, start=10.0 * (i + 1)) for i, c in enumerate(counts)]
    out = pad_regions(items, max_regions)
    kept = [min(c, max_regions) for c in counts]
    assert out["features"].shape == (len(counts), max(kept), 3)
    assert out["region_mask"].sum(dim=1).tolist() == kept
    for row, (item, n) in enumerate(zip(items, kept)):
        assert out["region_mask"][row, :n].all()
        np.testing.assert_array_equal(out["features"][row, :n].numpy(), item.features[:n])
        np.testing.assert_array_equal(out["boxes"][row, :n].numpy(), item.boxes[:n])
        assert not out["features"][row, n:].any() and not out["boxes"][row, n:].any()
