"""Weak visual evidence, alike in every split: objects drawn in shadow (colour barely visible) and missed detections.

- Ambiguous objects: each object is, with probability ``Confound.ambiguous``, drawn with its fill pulled towards one
  neutral grey, ``NEUTRAL + contrast * (colour - NEUTRAL)`` (plus the usual per-object jitter): at contrast 0 every
  colour is drawn the same, so nothing in the pixels tells it; the shape stays visible (:data:`NEUTRAL` is 50 grey
  levels below the background). The feature extractor is not taught their colour (:mod:`.featurize` ignores it).
- Missed detections: each object of the second shape of a ``cooccur`` pair (the B of A:B) is, with probability
  ``Confound.missed``, given no region by the detector (never every object of an image: one box stays).

Why (the confound's module docstring): a captioner has to fall back on the training co-occurrence when the feature
does not show the attribute or the object, which is what makes the confound bias it. The realised rates per split
are measured by :func:`evidence_statistics`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .confound import share
from .scene import SceneObject

NEUTRAL = np.array([70.0, 70.0, 70.0])  # the shadow's grey: darker than the background (120 +- 12), not black (20)


def shadow_fill(rgb: Sequence[int], contrast: float) -> np.ndarray:
    """The fill (3,) float of a colour ``rgb`` seen in shadow at ``contrast`` (0: the neutral grey; 1: the colour)."""
    return NEUTRAL + contrast * (np.asarray(rgb, dtype=np.float64) - NEUTRAL)


def mark_ambiguous(objects: Sequence[SceneObject], fraction: float, rng: np.random.Generator) -> list[SceneObject]:
    """The objects, each made ambiguous with probability ``fraction``."""
    return [SceneObject(o.shape, o.colour, o.size, o.box, bool(rng.random() < fraction)) for o in objects]


def choose_missed(objects: Sequence[SceneObject], shapes: frozenset[str], fraction: float,
                  rng: np.random.Generator) -> frozenset[int]:
    """Indices of the objects the detector misses: each of ``shapes`` with probability ``fraction``, never all."""
    missed = [k for k, o in enumerate(objects) if o.shape in shapes and rng.random() < fraction]
    return frozenset(missed[:-1] if len(missed) == len(objects) else missed)


def evidence_statistics(images: Iterable[tuple[str, Sequence[dict], set[int]]], missed_shapes: Sequence[str]) -> dict:
    """Per split, from ``(split, objects as in scenes.json, indices of the detected objects)`` items: ``objects``,
    ``ambiguous`` and ``ambiguous_rate``; per shape of ``missed_shapes``: its ``objects``, ``missed`` and
    ``missed_rate`` (objects without a region)."""
    counts: dict[str, dict] = {}
    for split, objects, detected in images:
        cell = counts.setdefault(split, {"objects": 0, "ambiguous": 0, "shapes": {s: [0, 0] for s in missed_shapes}})
        cell["objects"] += len(objects)
        cell["ambiguous"] += sum(bool(o.get("ambiguous")) for o in objects)
        for k, obj in enumerate(objects):
            if obj["shape"] in cell["shapes"]:
                cell["shapes"][obj["shape"]][0] += 1
                cell["shapes"][obj["shape"]][1] += k not in detected
    return {split: {"objects": c["objects"], "ambiguous": c["ambiguous"],
                    "ambiguous_rate": share(c["ambiguous"], c["objects"]),
                    "missed": {s: {"objects": n, "missed": m, "missed_rate": share(m, n)}
                               for s, (n, m) in c["shapes"].items()}}
            for split, c in counts.items()}
