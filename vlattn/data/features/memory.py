"""Region features given in memory (arrays or tensors from the caller) behind the :class:`FeatureStore` protocol,
so that features computed in Python go through the same datasets and collation as a store on disk."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from vlattn.data.features.base import RegionFeatures
from vlattn.errors import DataError


def _as_array(value: Any, what: str, index: int) -> np.ndarray:
    """``value`` (a numpy array, a torch tensor or nested lists) as a float32 numpy array, a copy the store owns."""
    if hasattr(value, "detach"):  # a torch tensor: no torch import needed in the data layer
        value = value.detach().cpu().numpy()
    try:
        return np.array(value, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise DataError(f"{what} of image {index}: not an array of numbers ({err})") from None


def _split(value: Any, what: str) -> list[Any]:
    """Per-image items of ``value``: a list/tuple of (N_i, K) arrays, or one (B, N, K) / (N, K) array."""
    if isinstance(value, (list, tuple)):
        return list(value)
    ndim = getattr(value, "ndim", None)
    if ndim == 3:
        return list(value)
    if ndim == 2:
        return [value]
    raise DataError(f"{what}: expected (N, K) for one image, (B, N, K) or a list of (N_i, K) arrays, got "
                    f"{'shape ' + str(tuple(value.shape)) if ndim is not None else type(value).__name__}")


class MemoryStore:
    """Images ``0 .. B-1`` (or ``ids``) with the given region ``features`` (N_i, D) and ``boxes`` (N_i, 4) as
    x1, y1, x2, y2 fractions of the image's width and height (None: all-zero boxes). The arrays are copied."""

    path = "<memory>"

    def __init__(self, features: Any, boxes: Any = None, ids: Sequence[int] | None = None) -> None:
        items = _split(features, "features")
        box_items = _split(boxes, "boxes") if boxes is not None else [None] * len(items)
        if not items:
            raise DataError("features: no images given")
        if len(box_items) != len(items):
            raise DataError(f"boxes: {len(box_items)} images of boxes for {len(items)} images of features")
        keys = list(ids) if ids is not None else list(range(len(items)))
        if len(keys) != len(items) or len(set(keys)) != len(keys):
            raise DataError(f"ids: expected {len(items)} distinct image ids, got {keys!r}")
        self._regions: dict[int, RegionFeatures] = {}
        for index, (key, feats, box) in enumerate(zip(keys, items, box_items)):
            array = _as_array(feats, "features", index)
            if array.ndim != 2 or array.shape[0] < 1:
                raise DataError(f"features of image {index}: expected (N, D) with N >= 1, got shape {array.shape}")
            box_array = np.zeros((array.shape[0], 4), np.float32) if box is None else _as_array(box, "boxes", index)
            if box_array.shape != (array.shape[0], 4):
                raise DataError(f"boxes of image {index}: expected shape ({array.shape[0]}, 4), got {box_array.shape}")
            # width = height = 1: the boxes are fractions already (collation divides by the image size)
            self._regions[int(key)] = RegionFeatures(array, box_array, 1, 1)
        dims = {regions.features.shape[1] for regions in self._regions.values()}
        if len(dims) != 1:
            raise DataError(f"features: every image needs the same feature size, got {sorted(dims)}")
        self._dim = dims.pop()

    @property
    def dim(self) -> int:
        return self._dim

    def ids(self) -> list[int]:
        return sorted(self._regions)

    def __contains__(self, image_id: object) -> bool:
        return image_id in self._regions

    def __len__(self) -> int:
        return len(self._regions)

    def get(self, image_id: int) -> RegionFeatures:
        if image_id not in self._regions:
            raise DataError("image id not given", path=self.path, item=image_id)
        return self._regions[image_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids())
