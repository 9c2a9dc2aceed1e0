"""A small synthetic data set (captions, VQA, rendered images, its extractor and 2 x 2 grid features) and a folder
of its images, half re-saved as JPEG, shared by the tests of vlattn.pixels."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image

from vlattn.data.synth import generate

GRID = 2


@pytest.fixture(scope="session")
def synth_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pixels") / "data"
    return generate(root, images=30, seed=3, feature_dim=16, grid=GRID, image_size=48, extractor_epochs=1)


@pytest.fixture(scope="session")
def photos(synth_set: Path) -> Path:
    """The rendered images: odd ids as JPEG (quality 95), even ids as the PNG files."""
    folder = synth_set.parent / "photos"
    folder.mkdir()
    for png in sorted((synth_set / "images").glob("*.png")):
        image_id = int(png.stem.split("_")[-1])
        if image_id % 2:
            Image.open(png).save(folder / f"photo_{image_id}.jpg", quality=95)
        else:
            shutil.copy(png, folder / f"photo_{image_id}.png")
    return folder
