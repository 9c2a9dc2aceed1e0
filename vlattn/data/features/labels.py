"""What a detector said about each region, beside its features: the object class and the attribute class with
their scores (bottom-up-attention's ``objects_id``/``objects_conf``/``attrs_id``/``attrs_conf``, which LXMERT's
masked object prediction learns), read from the stores that keep them.

A store offers them through ``labels(image_id) -> RegionLabels | None`` (the memmap layout, LXMERT's TSV files) or,
without attributes, through ``detections(image_id) -> (classes, scores) | None`` (the npz and HDF5 layouts);
:func:`region_labels` asks whichever the store has.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vlattn.data.features.base import FeatureStore


@dataclass(frozen=True)
class RegionLabels:
    """Per region of one image: ``objects`` (N,) int64 classes and ``object_scores`` (N,) float32; ``attributes``
    (N,) int64 and ``attribute_scores`` (N,) float32 when the store has them, else None."""

    objects: np.ndarray
    object_scores: np.ndarray
    attributes: np.ndarray | None = None
    attribute_scores: np.ndarray | None = None


def region_labels(store: FeatureStore, image_id: int) -> RegionLabels | None:
    """The labels ``store`` keeps for ``image_id``'s regions, or None when it keeps none."""
    labels = getattr(store, "labels", None)
    if labels is not None:
        return labels(image_id)
    detections = getattr(store, "detections", None)
    found = None if detections is None else detections(image_id)
    return None if found is None else RegionLabels(found[0], found[1])
