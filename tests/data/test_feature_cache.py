"""CachedStore: each image is read from the store once when the store fits the byte budget, else read through."""

from __future__ import annotations

import numpy as np
import pytest

from vlattn.data.features.base import RegionFeatures
from vlattn.data.features.cache import CachedStore
from vlattn.errors import DataError


class CountingStore:
    """A store of ``n`` images with ``regions`` regions of ``dim`` features each, counting reads per image."""

    path = "counting"

    def __init__(self, n: int, regions: int = 3, dim: int = 4) -> None:
        self.n, self.regions, self.dim = n, regions, dim
        self.reads: dict[int, int] = {}

    def ids(self) -> list[int]:
        return list(range(self.n))

    def __contains__(self, image_id: object) -> bool:
        return isinstance(image_id, int) and 0 <= image_id < self.n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter(range(self.n))

    def get(self, image_id: int) -> RegionFeatures:
        if image_id not in self:
            raise DataError("image id not in the store", path=self.path, item=image_id)
        self.reads[image_id] = self.reads.get(image_id, 0) + 1
        features = np.full((self.regions, self.dim), float(image_id), dtype=np.float32)
        boxes = np.tile(np.array([0, 0, 1, 1], dtype=np.float32), (self.regions, 1))
        return RegionFeatures(features, boxes, 10, 10)


def image_bytes(store: CountingStore) -> int:
    return store.regions * (store.dim + 4) * 4  # float32 features + boxes


def test_images_are_read_once_when_the_store_fits_the_budget() -> None:
    store = CountingStore(5)
    cached = CachedStore(store, max_bytes=5 * image_bytes(store))  # room for exactly the five images
    for _ in range(3):
        for image_id in (3, 1, 4, 0, 2):
            assert cached.get(image_id).features[0, 0] == image_id
    assert store.reads == {image_id: 1 for image_id in range(5)}
    assert cached.caching is True and cached.cached_bytes == 5 * image_bytes(store)


def test_a_store_larger_than_the_budget_is_read_through() -> None:
    """Caching part of a store that does not fit would hold the whole budget in every worker for few hits."""
    store = CountingStore(5)
    cached = CachedStore(store, max_bytes=4 * image_bytes(store))  # four of the five images would fit
    for _ in range(2):
        for image_id in range(5):
            assert cached.get(image_id).features[0, 0] == image_id
    assert cached.caching is False and cached.cached_bytes == 0
    assert store.reads == {image_id: 2 for image_id in range(5)}


def test_no_budget_reads_every_time_and_cached_arrays_are_read_only() -> None:
    store = CountingStore(2)
    uncached = CachedStore(store, max_bytes=0)
    uncached.get(0), uncached.get(0)
    assert store.reads == {0: 2}
    regions = CachedStore(store, max_bytes=10**6).get(1)
    with pytest.raises(ValueError):
        regions.features[0, 0] = 7.0  # a caller cannot change what later reads return


def test_the_protocol_and_errors_are_those_of_the_store() -> None:
    store = CountingStore(3)
    cached = CachedStore(store, max_bytes=10**6)
    assert (cached.dim, len(cached), cached.ids(), list(cached), 2 in cached, 5 in cached, cached.path) == (
        4, 3, [0, 1, 2], [0, 1, 2], True, False, "counting")
    with pytest.raises(DataError, match="image id not in the store"):
        cached.get(5)
