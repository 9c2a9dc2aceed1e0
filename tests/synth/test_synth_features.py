"""Region features carry the objects' attributes: a linear probe reads them on held-out boxes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vlattn.data.features import open_store
from vlattn.data.synth.lexicon import COLOURS, SHAPES, SIZES


def _probe_accuracy(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, classes: int
) -> float:
    """Ridge regression on one-hot targets over standardised features; accuracy of its argmax."""
    mean, std = x_train.mean(0), x_train.std(0) + 1e-6
    a, b = (x_train - mean) / std, (x_test - mean) / std
    a, b = np.hstack([a, np.ones((len(a), 1))]), np.hstack([b, np.ones((len(b), 1))])
    weights = np.linalg.solve(a.T @ a + 10.0 * np.eye(a.shape[1]), a.T @ np.eye(classes)[y_train])
    return float(((b @ weights).argmax(1) == y_test).mean())


def test_linear_probe_reads_attributes_on_held_out_boxes(synth_dir: Path, scenes: dict[int, dict]) -> None:
    store = open_store(synth_dir / "features")
    rows: dict[bool, list[tuple[np.ndarray, dict]]] = {True: [], False: []}
    for image_id, image in scenes.items():
        for feature, region in zip(store.get(image_id).features, image["regions"]):
            if region["object"] is not None:
                rows[image["split"] == "train"].append((feature, image["objects"][region["object"]]))
    for key, names, least in (("colour", list(COLOURS), 0.7), ("shape", list(SHAPES), 0.5), ("size", list(SIZES), 0.8)):
        (x_train, y_train), (x_test, y_test) = (
            (np.stack([f for f, _ in rows[train]]), np.array([names.index(o[key]) for _, o in rows[train]]))
            for train in (True, False)
        )
        accuracy = _probe_accuracy(x_train, y_train, x_test, y_test, len(names))
        assert accuracy > least, (key, accuracy, 1 / len(names))  # chance: 1/8, 1/6, 1/2


def test_features_are_finite_and_sized(synth_dir: Path, scenes_json: dict) -> None:
    store = open_store(synth_dir / "features")
    features = np.concatenate([store.get(i).features for i in store.ids()])
    assert store.dim == 64 and np.isfinite(features).all() and features.std() > 0
    assert scenes_json["info"]["extractor"]["heldout_accuracy"]["colour"] > 0.7
