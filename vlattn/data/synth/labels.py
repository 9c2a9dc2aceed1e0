"""The simulated detector's labels of each region, as bottom-up-attention's object and attribute heads label
theirs (``objects_id``, ``attrs_id``): what LXMERT's masked object prediction learns to recover.

Object classes: 0 = background (a box over no object), then one class per shape (:data:`OBJECT_NAMES`).
Attribute classes: 0 = none (background), then one class per (size, colour) pair, e.g. ``small red``
(:data:`ATTRIBUTE_NAMES`): bottom-up gives each region one attribute, and the synthetic objects have two. The
simulated detector is sure of its labels: every score is 1, and the labels are the scene's truth (an object drawn in
shadow keeps its colour).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vlattn.data.features.base import RegionFeatures

from .lexicon import COLOURS, SHAPES, SIZES
from .sample import Sample

OBJECT_NAMES: tuple[str, ...] = ("background", *SHAPES)
ATTRIBUTE_NAMES: tuple[str, ...] = ("none", *(f"{size} {colour}" for colour in COLOURS for size in SIZES))


def object_class(shape: str | None) -> int:
    """The object class of a region over an object of ``shape`` (None: background)."""
    return 0 if shape is None else 1 + SHAPES.index(shape)


def attribute_class(size: str | None, colour: str | None) -> int:
    """The attribute class of a region over an object of ``size`` and ``colour`` (None: background)."""
    if size is None or colour is None:
        return 0
    return ATTRIBUTE_NAMES.index(f"{size} {colour}")


def labelled(regions: RegionFeatures, sample: Sample) -> RegionFeatures:
    """``regions`` (the sample's detection boxes, in detector order) with their object and attribute classes."""
    objects = [sample.scene.objects[k] if k >= 0 else None for k in sample.detections.objects]
    classes = np.array([object_class(o and o.shape) for o in objects], dtype=np.int64)
    attributes = np.array([attribute_class(o and o.size, o and o.colour) for o in objects], dtype=np.int64)
    ones = np.ones(len(objects), dtype=np.float32)
    return dataclasses.replace(regions, classes=classes, scores=ones, attributes=attributes, attribute_scores=ones)
