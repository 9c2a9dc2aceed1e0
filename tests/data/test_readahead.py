"""Batch read-ahead: a DataLoader batch of a region dataset hints every image's byte ranges to the kernel before
reading them, and returns exactly what item-by-item reads return, in the sampler's order, with the same errors;
float16 features become the same float32 values numpy's conversion gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import vlattn.data.features.memmap as memmap_module
from vlattn.data.captioning import CaptionEvalSet, CaptionTrainSet, collate_eval, collate_train
from vlattn.data.features import MemmapStore, RegionFeatures, write_memmap, write_npz_dir
from vlattn.data.features.cache import CachedStore
from vlattn.data.features.checks import as_float32
from vlattn.data.karpathy import ImageEntry
from vlattn.data.nlvr2 import NLVR2Dataset, Statement, collate_nlvr2
from vlattn.data.pretraining import Pair, PretrainDataset, collate_pretrain
from vlattn.data.regions import ReadaheadBatches
from vlattn.data.vocab import Vocabulary
from vlattn.data.vqa import Annotation, Question, VQADataset, collate_vqa
from vlattn.data.vqa_answers import AnswerVocabulary
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.errors import DataError

DIM = 8
COUNTS = {11: 3, 22: 1, 33: 4, 44: 2}  # regions per image, in storage order
ENTRIES = [ImageEntry(i, "train", f"{i}.jpg", [["a", "cube"], ["red"]], ["a cube", "red"]) for i in COUNTS]
VOCAB = Vocabulary(["a", "cube", "red"])
PIECES = WordPieceVocabulary(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "red", "cube"])


def regions(image_id: int, count: int) -> RegionFeatures:
    rng = np.random.default_rng(image_id)
    boxes = np.tile(np.array([[1, 2, 5, 7]], dtype=np.float32), (count, 1))
    return RegionFeatures(rng.normal(size=(count, DIM)).astype(np.float32), boxes, 10, 10)


@pytest.fixture()
def store(tmp_path: Path) -> MemmapStore:
    write_memmap(tmp_path / "feats", [(i, regions(i, n)) for i, n in COUNTS.items()])
    return MemmapStore(tmp_path / "feats")


class ItemByItem(Dataset):
    """``dataset`` without ``__getitems__``: the DataLoader reads its batches one item at a time."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> object:
        return self.dataset[index]


def vqa_set(store: MemmapStore) -> VQADataset:
    owners = [33, 11, 44, 33, 22]
    questions = [Question(q, image_id, "what is it?") for q, image_id in enumerate(owners)]
    annotations = {q: Annotation(q, image_id, "what", "other", "red", ["red"] * 10) for q, image_id in enumerate(owners)}
    return VQADataset(questions, annotations, store, VOCAB, AnswerVocabulary(["red"]), max_regions=3)


def pretrain_set(store: MemmapStore) -> PretrainDataset:
    pairs = [Pair(image_id, "a red cube") for image_id in (22, 44, 11, 33, 44)]
    return PretrainDataset(pairs, store, PIECES, 2, max_regions=3, max_length=6, object_classes=1, attribute_classes=1)


def nlvr2_set(store: MemmapStore) -> NLVR2Dataset:
    pairs = [(11, 22), (44, 33), (22, 22), (33, 11)]
    statements = [Statement(f"s{n}", images, "a red cube", n % 2) for n, images in enumerate(pairs)]
    return NLVR2Dataset(statements, store, PIECES, max_regions=3, max_question_len=6)


def assert_same_batches(first: list[dict], second: list[dict]) -> None:
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], torch.Tensor):
                assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
            else:
                assert a[key] == b[key], key


@pytest.mark.parametrize("task", ["train", "eval", "vqa", "pretrain", "nlvr2"])
def test_batches_equal_item_by_item_reads_in_the_samplers_order(
    store: MemmapStore, task: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset, collate = {"train": (CaptionTrainSet(ENTRIES, store, VOCAB, 3, 20), collate_train),
                        "eval": (CaptionEvalSet(ENTRIES, store, 3), collate_eval),
                        "vqa": (vqa_set(store), collate_vqa),
                        "pretrain": (pretrain_set(store), collate_pretrain),
                        "nlvr2": (nlvr2_set(store), collate_nlvr2)}[task]
    order = [[5, 0, 3], [1], [7, 2, 6, 4]] if task == "train" else [[3, 0], [2], [1]]
    hinted: list[list[int]] = []
    monkeypatch.setattr(MemmapStore, "prefetch", lambda self, ids: hinted.append(list(ids)))
    batched = list(DataLoader(dataset, batch_sampler=order, collate_fn=collate))
    plain = list(DataLoader(ItemByItem(dataset), batch_sampler=order, collate_fn=collate))
    assert_same_batches(batched, plain)
    # the images each batch reads, by hand from the sets above; caption pairs 2k and 2k + 1 are the two captions of
    # image k (storage order 11, 22, 33, 44); an NLVR2 statement reads its left image, then its right one
    expected_ids = {"train": [[33, 11, 22], [11], [44, 22, 44, 33]], "eval": [[44, 11], [33], [22]],
                    "vqa": [[33, 33], [44], [11]], "pretrain": [[33, 22], [11], [44]],
                    "nlvr2": [[33, 11, 11, 22], [22, 22], [44, 33]]}[task]
    assert hinted == expected_ids  # one hint per batch, before its reads, naming its images in order
    if task == "nlvr2":
        assert [batch["identifiers"] for batch in batched] == [["s3", "s0"], ["s2"], ["s1"]]
    else:
        assert [batch["image_ids"].tolist() for batch in batched] == expected_ids


def test_readahead_batches_hint_the_next_batch_before_handing_out_this_one(
    store: MemmapStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, list[int]]] = []
    monkeypatch.setattr(MemmapStore, "prefetch", lambda self, ids: events.append(("hint", list(ids))))
    dataset = CaptionEvalSet(ENTRIES, store, 3)  # item k reads image 11, 22, 33, 44
    order = [[3, 0], [2], [1, 2]]
    for ahead, expected in ((1, [("hint", [44, 11]), ("hint", [33]), ("batch", [3, 0]), ("hint", [22, 33]),
                                 ("batch", [2]), ("batch", [1, 2])]),
                            (2, [("hint", [44, 11]), ("hint", [33]), ("hint", [22, 33]), ("batch", [3, 0]),
                                 ("batch", [2]), ("batch", [1, 2])])):
        events.clear()
        batches = ReadaheadBatches(order, dataset, ahead=ahead)
        assert len(batches) == 3
        for batch in batches:
            events.append(("batch", batch))
        assert events == expected
    events.clear()
    loaded = list(DataLoader(dataset, batch_sampler=ReadaheadBatches(order, dataset), collate_fn=collate_eval))
    plain = list(DataLoader(ItemByItem(dataset), batch_sampler=order, collate_fn=collate_eval))
    assert_same_batches(loaded, plain)
    assert [ids for kind, ids in events] == [[44, 11], [33], [44, 11], [22, 33], [33], [22, 33]]  # + each batch's own
    with pytest.raises(ValueError, match="ahead"):
        ReadaheadBatches(order, dataset, ahead=0)


def test_prefetch_hints_each_images_features_and_boxes(store: MemmapStore, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, list[tuple[int, int]]]] = []

    def record(fd: int, ranges) -> None:
        calls.append((Path(f"/proc/self/fd/{fd}").resolve().name, list(ranges)))

    monkeypatch.setattr(memmap_module, "will_need", record)
    store.prefetch([33, 999, 11, 22])  # 999 is not in the store: left for get() to report
    # rows: 11 -> 0:3, 22 -> 3:4, 33 -> 4:8, 44 -> 8:10; float16 features of 8 values (16 B), float32 boxes (16 B)
    assert calls == [("features.f16", [(4 * 16, 4 * 16), (0, 3 * 16), (3 * 16, 16)]),
                     ("boxes.f32", [(4 * 16, 4 * 16), (0, 3 * 16), (3 * 16, 16)])]
    with pytest.raises(DataError, match="not in the memmap store") as err:
        store.get(999)
    assert "999" in str(err.value) and str(store.path) in str(err.value)


def test_the_real_hint_leaves_reads_unchanged(store: MemmapStore, tmp_path: Path) -> None:
    fresh = MemmapStore(tmp_path / "feats")
    before = {i: fresh.get(i) for i in COUNTS}
    store.prefetch(list(COUNTS))
    for image_id, expected in before.items():
        got = store.get(image_id)
        assert np.array_equal(got.features, expected.features) and np.array_equal(got.boxes, expected.boxes)


def test_cached_store_hints_only_images_it_does_not_hold(store: MemmapStore, monkeypatch: pytest.MonkeyPatch) -> None:
    hinted: list[list[int]] = []
    monkeypatch.setattr(MemmapStore, "prefetch", lambda self, ids: hinted.append(list(ids)))
    cached = CachedStore(store, max_bytes=1 << 20)
    cached.get(22)
    cached.prefetch([33, 22, 11])
    assert hinted == [[33, 11]]


def test_stores_without_read_ahead_batch_as_before(tmp_path: Path) -> None:
    write_npz_dir(tmp_path / "npz", [(i, regions(i, n)) for i, n in COUNTS.items()])
    from vlattn.data.features import open_store

    dataset = CaptionEvalSet(ENTRIES, open_store(tmp_path / "npz"), 3)
    assert not hasattr(dataset.store, "prefetch")
    (batch,) = DataLoader(dataset, batch_sampler=[[2, 0]], collate_fn=collate_eval)
    assert batch["image_ids"].tolist() == [33, 11]
    assert torch.equal(batch["features"][1, :3], torch.from_numpy(regions(11, 3).features))  # npz keeps float32


def test_a_failed_read_in_a_batch_names_the_file_and_the_image(store: MemmapStore, tmp_path: Path) -> None:
    dataset = CaptionEvalSet(ENTRIES, store, 3)
    features = tmp_path / "feats" / "features.f16"
    with open(features, "r+b") as handle:  # truncated after the store was opened: image 44 (rows 8:10) is cut
        handle.truncate(9 * DIM * 2)
    loader = DataLoader(dataset, batch_sampler=[[0, 3, 1]], collate_fn=collate_eval)
    with pytest.raises(DataError, match="features.f16 ends early") as err:
        next(iter(loader))
    assert "44" in str(err.value) and str(tmp_path / "feats") in str(err.value)


def test_float16_to_float32_is_exact_for_every_finite_half_value() -> None:
    half = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    half = half[np.isfinite(half)].reshape(-1, 2)  # 63,488 finite values (2 x 1,024 bit patterns are inf/NaN)
    converted = as_float32(half.copy())
    assert converted.dtype == np.float32 and converted.shape == half.shape
    assert np.array_equal(converted.view(np.uint32), half.astype(np.float32).view(np.uint32))  # bit for bit
    by_bits = {0x3C00: 1.0, 0x7BFF: 65504.0, 0x0001: 2.0**-24, 0xC000: -2.0, 0x8000: -0.0}
    for bits, value in by_bits.items():
        got = as_float32(np.array([[bits]], dtype=np.uint16).view(np.float16))
        assert got[0, 0] == value and np.signbit(got[0, 0]) == np.signbit(value)
    read_only = half.copy()
    read_only.flags.writeable = False  # not handed to torch (which would warn): numpy's conversion, same values
    assert np.array_equal(as_float32(read_only), converted)
