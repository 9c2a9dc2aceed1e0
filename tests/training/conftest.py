"""A tiny, learnable captioning data set written in the real formats (Karpathy json + memmap store)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from vlattn.config import Config, load_config
from vlattn.data.features import RegionFeatures, write_memmap
from vlattn.data.karpathy import ImageEntry, write_karpathy
from vlattn.tasks import captioning

COLOURS = ["red", "green", "blue", "yellow"]
SHAPES = ["circle", "square", "star"]
DIM = 16


def make_tiny_data(root: Path, images: int = 36, seed: int = 0) -> Path:
    """Each image shows one object; its region feature one-hot encodes colour and shape.

    Captions name the colour and shape, so a model that reads the features can caption perfectly.
    """
    rng = np.random.default_rng(seed)
    entries, regions = [], []
    for index in range(images):
        colour, shape = index % len(COLOURS), (index // len(COLOURS)) % len(SHAPES)
        feature = np.zeros((2, DIM), dtype=np.float32)
        feature[0, colour] = 1.0
        feature[0, len(COLOURS) + shape] = 1.0
        feature[1] = rng.normal(0, 0.1, DIM)  # a distractor region
        boxes = np.array([[4, 4, 20, 20], [0, 0, 32, 32]], dtype=np.float32)
        raw = [f"a {COLOURS[colour]} {SHAPES[shape]}", f"there is a {COLOURS[colour]} {SHAPES[shape]}",
               f"one {COLOURS[colour]} {SHAPES[shape]} in the picture"]
        split = "train" if index < images * 2 // 3 else ("val" if index < images * 5 // 6 else "test")
        image_id = 100 + index
        entries.append(ImageEntry(image_id, split, f"{image_id}.png", [r.split() for r in raw], raw))
        regions.append((image_id, RegionFeatures(feature, boxes, 32, 32)))
    write_karpathy(root / "dataset.json", entries)
    write_memmap(root / "features", regions)
    return root


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_data(tmp_path_factory.mktemp("tiny"))


def tiny_config(root: Path, *extra: str) -> Config:
    """A 1+1-layer d=32 Transformer on the tiny data, with dropout so RNG state matters."""
    return load_config(None, [
        f"data.root={root}", "data.vocab_min_count=1", "data.max_regions=4",
        f"model.feature_dim={DIM}", "model.d_model=32", "model.num_heads=2", "model.d_ff=64",
        "model.encoder_layers=1", "model.decoder_layers=1", "model.dropout=0.1",
        "train.epochs=2", "train.batch_size=8", "train.log_every=1", "train.schedule.options.warmup=20",
        "train.schedule.options.scale=2.0", "eval.beam_size=2", "eval.batch_size=8", *extra,
    ])


class Crash(RuntimeError):
    """A simulated kill of a training run."""


@contextlib.contextmanager
def crash_at_step(step: int) -> Iterator[None]:
    """Within the block, the captioning XE objective raises :class:`Crash` at its ``step``-th call (1-based)."""
    real = captioning.xe_objective

    def crashing_objective(**kwargs):
        objective, calls = real(**kwargs), {"n": 0}

        def wrapped(model, batch):
            calls["n"] += 1
            if calls["n"] == step:
                raise Crash("simulated kill")
            return objective(model, batch)

        return wrapped

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(captioning, "xe_objective", crashing_objective)
        yield
