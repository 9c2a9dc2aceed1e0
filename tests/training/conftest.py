"""A tiny, learnable captioning data set written in the real formats (Karpathy json + memmap store)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from vlattn.config import Config
from vlattn.validation import load_valid_config
from vlattn.data.features import RegionFeatures, write_memmap
from vlattn.data.karpathy import ImageEntry, load_karpathy, write_karpathy
from vlattn.tasks import captioning

COLOURS = ["red", "green", "blue", "yellow"]
SHAPES = ["circle", "square", "star"]
DIM = 16


def make_tiny_data(root: Path, images: int = 36, seed: int = 0, first_id: int = 100) -> Path:
    """Each image shows one object; its region feature one-hot encodes colour and shape. Image ids count from
    ``first_id``.

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
        image_id = first_id + index
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
    return load_valid_config(None, [
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


def make_tiny_vqa_data(root: Path, images: int = 36, seed: int = 0) -> Path:
    """:func:`make_tiny_data` plus VQA v2 files ``vqa/{questions,annotations}_<split>.json``: per image "What
    color is the object?" (the colour), "What shape is it?" (the shape) and "Is it red?" (yes/no), ten
    human answers each (one of them a different spelling of the same answer); the first training image also
    has a question whose answers are never candidates ("What is it made of?": ten times "paper")."""
    from vlattn.data.vqa import Annotation, Question, write_annotations, write_questions

    make_tiny_data(root, images, seed)
    entries = {e.image_id: e for e in load_karpathy(root / "dataset.json")}
    for split in ("train", "val", "test"):
        questions, annotations = [], []
        for image_id, entry in entries.items():
            if entry.split != split:
                continue
            colour, shape = entry.captions[0][1], entry.captions[0][2]
            asked = [("What color is the object?", colour, "what color is the", "other", colour.upper()),
                     ("What shape is it?", shape, "what shape is", "other", f"a {shape}"),
                     ("Is it red?", "yes" if colour == "red" else "no", "is it", "yes/no", None)]
            if split == "train" and not questions:
                asked.append(("What is it made of?", "paper", "what is", "other", None))
            for k, (text, truth, kind, answer_type, variant) in enumerate(asked):
                qid = image_id * 10 + k
                humans = [truth] * 9 + [variant or truth]
                questions.append(Question(qid, image_id, text))
                annotations.append(Annotation(qid, image_id, kind, answer_type, truth, humans))
        write_questions(root / "vqa" / f"questions_{split}.json", questions, data_subtype=split)
        write_annotations(root / "vqa" / f"annotations_{split}.json", annotations, data_subtype=split)
    return root


def tiny_vqa_config(root: Path, *extra: str, stack: bool = True) -> Config:
    """A 1+1-layer d=32 MCAN on the tiny VQA data (every answer of the 24 training images is a candidate
    at ``answer_min_count`` 2). ``stack=False`` leaves out the MCAN stack's keys (heads, FFN, layers), for a
    model kind that does not read them."""
    mcan = ["model.num_heads=2", "model.d_ff=64", "model.encoder_layers=1", "model.decoder_layers=1"] if stack else []
    return load_valid_config(None, [
        "task=vqa", "model.kind=mcan", f"data.root={root}", "data.vocab_min_count=1", "data.max_regions=4",
        "data.answer_min_count=2", f"model.feature_dim={DIM}", "model.d_model=32", *mcan, "model.dropout=0.1",
        "model.options.word_dim=16", "train.epochs=10", "train.batch_size=8", "train.log_every=1",
        "train.schedule.name=constant", "train.schedule.options.lr=0.003", "train.bce_reduction=sum_answers",
        "eval.batch_size=16", *extra,
    ])
