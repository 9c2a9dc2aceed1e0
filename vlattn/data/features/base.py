"""The region-feature store protocol shared by every on-disk layout.

A store maps an integer image id to the detector regions of that image:

* ``features``: float32 array (N, D), one D-dimensional vector per region;
* ``boxes``: float32 array (N, 4), x1, y1, x2, y2 in pixels of the original image;
* ``width``/``height``: the original image size in pixels;
* optionally, for regions a detector found, ``classes`` (N,) int64 and ``scores`` (N,) float32 (the writers keep
  them; the readers return regions without them), and ``attributes`` (N,) int64 with ``attribute_scores`` (N,)
  float32 (bottom-up's attribute head; the memmap writer keeps them). :mod:`.labels` reads them back.

Backends (M2's single HDF5 file, bottom-up ``.npz`` per image, the project's memory-mapped format)
implement :class:`FeatureStore`. A missing id is always an error, never a substitute. A store that holds its
features in a narrower dtype may also offer ``get_stored(image_id)``: the same regions with the features in that
dtype (float16 for the memmap layout), exactly ``get``'s once widened (:func:`stored_regions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class RegionFeatures:
    """Regions of one image. ``features`` (N, D) float32 (float16 from :func:`stored_regions`), ``boxes`` (N, 4) float32 x1y1x2y2 pixels; a detector's
    ``classes`` (N,) int64 and ``scores`` (N,) float32 when known, and its ``attributes`` (N,) int64 with their
    ``attribute_scores`` (N,) float32."""

    features: np.ndarray
    boxes: np.ndarray
    width: int
    height: int
    classes: np.ndarray | None = field(default=None, compare=False)
    scores: np.ndarray | None = field(default=None, compare=False)
    attributes: np.ndarray | None = field(default=None, compare=False)
    attribute_scores: np.ndarray | None = field(default=None, compare=False)

    @property
    def num_regions(self) -> int:
        """N, the number of valid regions."""
        return int(self.features.shape[0])


@runtime_checkable
class FeatureStore(Protocol):
    """Read access to region features by image id."""

    path: str

    @property
    def dim(self) -> int:
        """D, the feature dimension of every region."""
        ...

    def ids(self) -> list[int]:
        """All image ids held by the store, sorted."""
        ...

    def __contains__(self, image_id: object) -> bool: ...

    def __len__(self) -> int: ...

    def get(self, image_id: int) -> RegionFeatures:
        """Regions of ``image_id``; raises :class:`vlattn.errors.DataError` naming the file and id."""
        ...

    def __iter__(self) -> Iterator[int]: ...


def stored_regions(store: FeatureStore, image_id: int) -> RegionFeatures:
    """The regions of ``image_id`` with the features in the store's dtype: ``store.get_stored`` where the store has
    it (float16 for a memmap store), else ``store.get`` (float32)."""
    read = getattr(store, "get_stored", None)
    return read(image_id) if read is not None else store.get(image_id)
