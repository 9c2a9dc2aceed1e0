"""Shared synthetic data sets: one small set with a trained extractor, read by most tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlattn.data.synth import generate

SMALL = {"images": 120, "seed": 3, "feature_dim": 64, "grid": 2, "val_size": 30, "test_size": 30,
         "extractor_epochs": 16}


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 images (60 train, 30 val, 30 test), 64-d features, a 2 x 2 grid, a briefly trained extractor."""
    return generate(tmp_path_factory.mktemp("synth") / "data", **SMALL)


@pytest.fixture(scope="session")
def scenes_json(synth_dir: Path) -> dict:
    """``scenes.json``: ``info`` (options, extractor report) and ``images``."""
    return json.loads((synth_dir / "scenes.json").read_text())


@pytest.fixture(scope="session")
def scenes(scenes_json: dict) -> dict[int, dict]:
    """``scenes.json`` images by id."""
    return {image["image_id"]: image for image in scenes_json["images"]}


@pytest.fixture(scope="session")
def next_to_gap(scenes_json: dict) -> float:
    return float(scenes_json["info"]["next_to_gap"])
