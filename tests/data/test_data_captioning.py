"""Captioning datasets over a feature store, and their collate functions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vlattn.data.captioning import CaptionEvalSet, CaptionTrainSet, collate_eval, collate_train
from vlattn.data.features import MemmapStore, RegionFeatures, write_memmap
from vlattn.data.karpathy import ImageEntry
from vlattn.data.vocab import Vocabulary
from vlattn.errors import DataError

DIM = 4
ENTRIES = [
    ImageEntry(10, "train", "10.png", [["a", "red", "cube"], ["cube"]], ["A red cube.", "Cube"]),
    ImageEntry(20, "train", "20.png", [["a", "blue", "ball", "on", "a", "cube"]], ["A blue ball on a cube"]),
]
VOCAB = Vocabulary(["a", "cube", "red", "blue"])  # a=4 cube=5 red=6 blue=7


def region_set(count: int, value: float) -> RegionFeatures:
    boxes = np.tile(np.array([[0, 0, 8, 8]], dtype=np.float32), (count, 1))
    return RegionFeatures(np.full((count, DIM), value, dtype=np.float32), boxes, 16, 12)


@pytest.fixture()
def store(tmp_path: Path) -> MemmapStore:
    write_memmap(tmp_path / "feats", [(10, region_set(2, 1.0)), (20, region_set(5, 2.0))])
    return MemmapStore(tmp_path / "feats")


def test_train_set_and_collate(store: MemmapStore) -> None:
    data = CaptionTrainSet(ENTRIES, store, VOCAB, max_regions=3, max_len=4)
    assert len(data) == 3
    batch = collate_train([data[0], data[1], data[2]])
    assert batch["image_ids"].tolist() == [10, 10, 20]
    assert batch["tokens"].dtype == torch.long
    assert batch["tokens"].tolist() == [
        [1, 4, 6, 5, 2, 0],
        [1, 5, 2, 0, 0, 0],
        [1, 4, 7, 3, 3, 2],  # truncated to max_len=4 words: a blue ball on
    ]
    assert batch["features"].shape == (3, 3, DIM)  # image 20 cut to max_regions=3
    assert batch["region_mask"].tolist() == [[True, True, False]] * 2 + [[True] * 3]
    assert batch["sizes"].tolist() == [[16, 12]] * 3
    assert batch["features"][2].eq(2.0).all() and batch["features"][0, 2].eq(0).all()


def test_eval_set_and_collate(store: MemmapStore) -> None:
    data = CaptionEvalSet(ENTRIES, store, max_regions=10)
    assert len(data) == 2
    batch = collate_eval([data[0], data[1]])
    assert batch["references"] == [["A red cube.", "Cube"], ["A blue ball on a cube"]]
    assert batch["features"].shape == (2, 5, DIM) and "tokens" not in batch
    assert batch["region_mask"].sum(dim=1).tolist() == [2, 5]


def test_works_with_dataloader(store: MemmapStore) -> None:
    loader = torch.utils.data.DataLoader(
        CaptionTrainSet(ENTRIES, store, VOCAB, max_regions=50, max_len=20), batch_size=2, collate_fn=collate_train
    )
    shapes = [tuple(batch["tokens"].shape) for batch in loader]
    assert shapes == [(2, 5), (1, 8)]


def test_missing_ids_reported_once_with_store_path(store: MemmapStore) -> None:
    extra = [ImageEntry(i, "val", "", [["x"]], ["x"]) for i in (31, 32)]
    with pytest.raises(DataError, match=r"2 of 4 images have no region features; first missing ids: \[31, 32\]") as err:
        CaptionEvalSet(ENTRIES + extra, store, max_regions=5)
    assert store.path in str(err.value)


def test_feature_dimension_checked(store: MemmapStore) -> None:
    with pytest.raises(DataError, match="feature dimension 4, expected 2048") as err:
        CaptionTrainSet(ENTRIES, store, VOCAB, max_regions=5, max_len=5, feature_dim=2048)
    assert store.path in str(err.value)
    assert len(CaptionTrainSet(ENTRIES, store, VOCAB, max_regions=5, max_len=5, feature_dim=DIM)) == 3


def test_train_items_match_encoding_each_caption(store: MemmapStore) -> None:
    """Items read from the flat arrays are each pair's caption encoded alone, cut to max_len, in entry order."""
    rng = np.random.default_rng(0)
    words = ["a", "cube", "red", "blue", "zebra"]  # zebra is not in VOCAB: UNK
    entries = [ImageEntry(image_id, "train", "", [[str(w) for w in rng.choice(words, size=rng.integers(1, 9))]
                                                  for _ in range(rng.integers(1, 4))], [])
               for image_id in (10, 20, 10)]
    data = CaptionTrainSet(entries, store, VOCAB, max_regions=3, max_len=5)
    expected = [(e.image_id, VOCAB.encode(c, 5)) for e in entries for c in e.captions]
    assert len(data) == len(expected)
    assert [(data[i]["image_id"], data[i]["tokens"]) for i in range(len(data))] == expected
    assert data.lengths() == [len(tokens) for _, tokens in expected]


def test_train_and_eval_sets_hold_no_per_caption_python_objects(store: MemmapStore) -> None:
    """What items are read from is numpy arrays: a forked worker reading them writes no reference count of the
    parent's caption objects (which would copy their pages into every worker)."""
    train = CaptionTrainSet(ENTRIES, store, VOCAB, max_regions=3, max_len=4)
    assert {k for k, v in vars(train).items() if not isinstance(v, (np.ndarray, int))} == {"store", "vocab"}
    evaluation = CaptionEvalSet(ENTRIES, store, max_regions=3)
    assert isinstance(evaluation.image_ids, np.ndarray)
    assert all(isinstance(v, np.ndarray) for v in vars(evaluation.references).values())


def test_packed_texts_round_trip() -> None:
    from vlattn.data.packed import PackedTexts

    groups = [["A red cube.", ""], [], ["naïve café — 東京", "x"], ["last"]]
    packed = PackedTexts(groups)
    assert len(packed) == 4 and [packed[i] for i in range(4)] == groups
