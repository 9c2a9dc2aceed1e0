"""Region features for generated samples: train the extractor on the train split, then embed
every detection box (and optionally a k x k grid of cells) of every image.

Every box, grid cell or detection, is embedded from the extractor's fixed-size window centred on it
(see :mod:`.extractor`), so features of a cell and of an object at the same place agree.

Ambiguous objects (drawn in shadow, :mod:`.evidence`) keep their shape and size labels but not their colour: the
extractor is not taught to read a colour the pixels barely show, as a detector pretrained elsewhere would not have
been; the report gives the colour head's held-out accuracy on clear and on ambiguous objects apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from vlattn.data.features.base import RegionFeatures

from .extractor import (
    BACKGROUND, HEADS, IGNORE, Crops, RegionCNN, default_epochs, extract, head_accuracy, train_extractor, window_crops,
)
from .lexicon import COLOURS, SHAPES, SIZES
from .sample import Sample


def ambiguous_crops(samples: Sequence[Sample]) -> np.ndarray:
    """(M,) bool: whether each detection box of ``samples`` (in :func:`labelled_crops` order) is of an ambiguous
    object."""
    return np.array([k >= 0 and s.scene.objects[k].ambiguous for s in samples for k in s.detections.objects], bool)


def labelled_crops(samples: Sequence[Sample]) -> Crops:
    """Windows around every detection box of ``samples`` with shape/colour/size labels."""
    pixels, labels = [], {name: [] for name in HEADS}
    for sample in samples:
        pixels.append(window_crops(sample.pixels, sample.detections.boxes))
        for index in sample.detections.objects:
            obj = sample.scene.objects[index] if index >= 0 else None
            labels["shape"].append(SHAPES.index(obj.shape) if obj else BACKGROUND)
            labels["colour"].append(list(COLOURS).index(obj.colour) if obj else IGNORE)
            labels["size"].append(SIZES.index(obj.size) if obj else IGNORE)
    return Crops(np.concatenate(pixels), {name: np.asarray(v, dtype=np.int64) for name, v in labels.items()})


def grid_boxes(image_size: int, k: int) -> np.ndarray:
    """The k x k cells tiling a square image, row by row: (k * k, 4) float32 x1y1x2y2 pixels."""
    edges = np.linspace(0, image_size, k + 1, dtype=np.float32)
    cells = [[edges[c], edges[r], edges[c + 1], edges[r + 1]] for r in range(k) for c in range(k)]
    return np.array(cells, dtype=np.float32)


def _embed(
    model: RegionCNN, samples: Sequence[Sample], boxes_of: Callable[[Sample], np.ndarray]
) -> list[RegionFeatures]:
    """Features of the boxes ``boxes_of(sample)`` (N, 4) of each sample, as one RegionFeatures each."""
    boxes = [boxes_of(s) for s in samples]
    crops = np.concatenate([window_crops(s.pixels, b) for s, b in zip(samples, boxes)])
    features = extract(model, crops)
    offsets = np.cumsum([0] + [len(b) for b in boxes])
    size = samples[0].scene.image_size
    return [RegionFeatures(features[a:z], b, size, size) for a, z, b in zip(offsets[:-1], offsets[1:], boxes)]


@dataclass(frozen=True)
class Featurized:
    """Per-sample detection features, optional grid features (``grid`` x ``grid`` cells), a report of the
    extractor and the extractor itself."""

    regions: list[RegionFeatures]
    grid: list[RegionFeatures] | None
    report: dict
    model: RegionCNN
    cells: int


def featurize(samples: Sequence[Sample], *, feature_dim: int, grid: int, epochs: int | None, seed: int) -> Featurized:
    """Train the extractor on the train-split samples' crops and embed every sample's regions.

    ``epochs`` None means :func:`~.extractor.default_epochs`. The report gives the epochs, the
    training set size and the heads' accuracy on the held-out (val/test) regions.
    """
    training = [s for s in samples if s.scene.split == "train"]
    train = labelled_crops(training)
    train.labels["colour"][ambiguous_crops(training)] = IGNORE
    epochs = default_epochs(len(train.pixels)) if epochs is None else epochs
    model = train_extractor(train, feature_dim, epochs=epochs, seed=seed)
    regions = _embed(model, samples, lambda s: s.detections.boxes)
    held_out = [k for k, s in enumerate(samples) if s.scene.split != "train"]
    report: dict = {"epochs": epochs, "train_crops": int(len(train.pixels)), "feature_dim": feature_dim}
    if held_out:
        labels = labelled_crops([samples[k] for k in held_out]).labels
        features = np.concatenate([regions[k].features for k in held_out])
        report["heldout_accuracy"] = head_accuracy(model, features, labels)
        ambiguous = ambiguous_crops([samples[k] for k in held_out])
        if ambiguous.any():
            report["heldout_colour_accuracy"] = {
                name: head_accuracy(model, features[rows], {h: v[rows] for h, v in labels.items()})["colour"]
                for name, rows in (("clear", ~ambiguous), ("ambiguous", ambiguous))}
    cells = grid_boxes(samples[0].scene.image_size, grid) if grid else None
    grid_features = _embed(model, samples, lambda s: cells) if cells is not None else None
    return Featurized(regions, grid_features, report, model, grid)
