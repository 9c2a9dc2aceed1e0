"""Batches with the features in the store's dtype (float16 from a memmap store), widened where they are used:
exactly the float32 batches, bit for bit (captioning, VQA, pretraining and NLVR2 batches, with and without DataLoader
workers handing them over in shared memory)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from vlattn.data.captioning import CaptionEvalSet, CaptionTrainSet, collate_eval, collate_train
from vlattn.data.features import MemmapStore, RegionFeatures, write_memmap
from vlattn.data.features.cache import CachedStore
from vlattn.data.handover import SharedBatches
from vlattn.data.karpathy import ImageEntry
from vlattn.data.nlvr2 import NLVR2Dataset, Statement, collate_nlvr2
from vlattn.data.pretraining import Pair, PretrainDataset, collate_pretrain
from vlattn.data.regions import batch_to_device, pad_regions
from vlattn.data.vocab import Vocabulary
from vlattn.data.vqa import Annotation, Question, VQADataset, collate_vqa
from vlattn.data.vqa_answers import AnswerVocabulary
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.errors import DataError

DIM = 8
COUNTS = {10: 1, 20: 5, 30: 3, 40: 2, 50: 4, 60: 5}  # regions per image
VOCAB = Vocabulary(["a", "cube", "red"])
ENTRIES = [ImageEntry(i, "train", f"{i}.png", [["a", "cube"], ["red"]], ["A cube", "Red"]) for i in COUNTS]
PIECES = WordPieceVocabulary(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "red", "cube"])
CPU = torch.device("cpu")


def half_values(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """float32 values that float16 holds exactly, from random bit patterns (subnormals, -0 and the largest finite
    values included; the NaN/inf patterns turned into subnormals)."""
    bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
    special = (bits & 0x7C00) == 0x7C00
    bits[special] &= 0x83FF
    return bits.view(np.float16).astype(np.float32)


@pytest.fixture()
def written(tmp_path: Path) -> tuple[MemmapStore, dict[int, np.ndarray]]:
    rng = np.random.default_rng(0)
    values = {i: half_values(rng, (n, DIM)) for i, n in COUNTS.items()}
    boxes = {i: np.tile(np.array([[0, 0, 8, 8]], dtype=np.float32), (n, 1)) for i, n in COUNTS.items()}
    write_memmap(tmp_path / "feats", [(i, RegionFeatures(values[i], boxes[i], 16, 12)) for i in COUNTS])
    return MemmapStore(tmp_path / "feats"), values


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int32) if tensor.dtype == torch.float32 else tensor


def expected_features(values: dict[int, np.ndarray], image_ids: list[int], max_regions: int) -> np.ndarray:
    """The batch's features by hand: each image's first regions, zero rows after them."""
    length = max(min(len(values[i]), max_regions) for i in image_ids)
    out = np.zeros((len(image_ids), length, DIM), dtype=np.float32)
    for row, image_id in enumerate(image_ids):
        kept = values[image_id][:max_regions]
        out[row, : len(kept)] = kept
    return out


def assert_widen_to(plain: list[dict], half: list[dict], values: dict[int, np.ndarray], zero: bool = False) -> None:
    """The float16 batches ``half`` widen to the float32 batches ``plain`` bit for bit, whose features are the
    stored values (zeros when ``zero``)."""
    assert len(plain) == len(half) == 3
    for before, after in zip(plain, half):
        assert before["features"].dtype == torch.float32 and after["features"].dtype == torch.float16
        widened = batch_to_device(after, CPU)
        assert widened.keys() == before.keys()
        for key in before:
            assert widened[key].dtype == before[key].dtype
            assert torch.equal(bits(widened[key]), bits(before[key])), key
        want = expected_features(values, before["image_ids"].tolist(), 4)
        want = np.zeros_like(want) if zero else want
        assert np.array_equal(widened["features"].numpy().view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("workers", [0, 2])
def test_stored_train_batches_widen_to_the_float32_batches_bit_for_bit(written, workers: int) -> None:
    store, values = written
    loaders = {
        stored: DataLoader(CaptionTrainSet(ENTRIES, store, VOCAB, max_regions=4, max_len=5, stored_dtype=stored),
                           batch_size=5, collate_fn=collate_train, num_workers=workers)
        for stored in (False, True)
    }
    assert_widen_to(list(loaders[False]), list(loaders[True]), values)


def test_stored_eval_batches_widen_to_the_float32_batches(written) -> None:
    store, values = written
    batches = [collate_eval([CaptionEvalSet(ENTRIES, store, 3, stored_dtype=stored)[i] for i in range(6)])
               for stored in (False, True)]
    assert batches[1]["features"].dtype == torch.float16
    widened = batch_to_device(batches[1], CPU)
    assert torch.equal(bits(widened["features"]), bits(batches[0]["features"]))
    assert widened["references"] == batches[0]["references"] == [["A cube", "Red"]] * 6
    assert np.array_equal(widened["features"].numpy(), expected_features(values, list(COUNTS), 3))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("zero_image", [False, True])
def test_stored_vqa_batches_widen_to_the_float32_batches(written, workers: int, zero_image: bool) -> None:
    store, values = written
    questions = [Question(n, image_id, "what is red") for n, image_id in enumerate([*COUNTS, *COUNTS])]
    humans = ["red"] * 6 + ["cube"] * 4
    annotations = {q.question_id: Annotation(q.question_id, q.image_id, "what", "other", "red", humans)
                   for q in questions}
    answers = AnswerVocabulary.build(["red", "cube"], top_k=2)
    loaders = {stored: DataLoader(VQADataset(questions, annotations, store, VOCAB, answers, max_regions=4,
                                             zero_image=zero_image, stored_dtype=stored),
                                  batch_size=5, collate_fn=SharedBatches(collate_vqa), num_workers=workers)
               for stored in (False, True)}
    assert_widen_to(list(loaders[False]), list(loaders[True]), values, zero=zero_image)


@pytest.mark.parametrize("workers", [0, 2])
def test_stored_pretraining_batches_widen_to_the_float32_batches(written, workers: int) -> None:
    store, values = written
    pairs = [Pair(image_id, text) for text in ("a red cube", "a cube") for image_id in COUNTS]
    loaders = {stored: DataLoader(PretrainDataset(pairs, store, PIECES, 2, max_regions=4, max_length=6, object_classes=1,
                                                  attribute_classes=1, stored_dtype=stored),
                                  batch_size=5, collate_fn=SharedBatches(collate_pretrain), num_workers=workers)
               for stored in (False, True)}
    assert_widen_to(list(loaders[False]), list(loaders[True]), values)


@pytest.mark.parametrize("workers", [0, 2])
def test_stored_nlvr2_batches_widen_to_the_float32_batches(written, workers: int) -> None:
    store, values = written
    images = list(COUNTS)
    statements = [Statement(f"s{n}", (images[n % 6], images[(n + 1) % 6]), "a red cube", n % 2) for n in range(7)]
    loaders = {stored: DataLoader(NLVR2Dataset(statements, store, PIECES, max_regions=4, max_question_len=6,
                                               stored_dtype=stored),
                                  batch_size=3, collate_fn=SharedBatches(collate_nlvr2), num_workers=workers)
               for stored in (False, True)}
    plain, half = list(loaders[False]), list(loaders[True])
    assert len(plain) == len(half) == 3
    for before, after, rows in zip(plain, half, (range(0, 3), range(3, 6), range(6, 7))):
        assert before["features"].dtype == torch.float32 and after["features"].dtype == torch.float16
        widened = batch_to_device(after, CPU)
        assert widened.keys() == before.keys() and widened["identifiers"] == before["identifiers"]
        for key in ("features", "boxes", "region_mask", "questions", "question_mask", "labels"):
            assert widened[key].dtype == before[key].dtype
            assert torch.equal(bits(widened[key]), bits(before[key])), key
        shown = [image for n in rows for image in statements[n].images]  # left, right of each statement
        want = expected_features(values, shown, 4)
        got = widened["features"].flatten(0, 1)  # (B, 2, N, D) -> (2B, N, D), image-major within a statement
        assert np.array_equal(got.numpy().view(np.int32), want.view(np.int32))


def test_get_stored_checks_what_get_checks(written) -> None:
    store, values = written
    assert store.get_stored(20).features.dtype == np.float16
    assert np.array_equal(store.get_stored(20).features.astype(np.float32), store.get(20).features)
    raw = Path(store.path) / "features.f16"
    data = bytearray(raw.read_bytes())
    first_of_30 = (COUNTS[10] + COUNTS[20]) * DIM * 2  # image 30's first value: rows of 10 and 20 come before
    data[first_of_30 : first_of_30 + 2] = np.array([np.nan], dtype=np.float16).tobytes()
    raw.write_bytes(bytes(data))
    damaged = MemmapStore(store.path)
    for read in (damaged.get, damaged.get_stored):
        with pytest.raises(DataError, match=r"features contain NaN or inf values") as err:
            read(30)
        assert "30" in str(err.value)


def test_a_batch_goes_to_shared_memory_when_asked_or_in_a_worker(written) -> None:
    store, _ = written
    items = [store.get_stored(i) for i in (10, 20)]
    assert pad_regions(items, 5, shared=True)["features"].is_shared()
    assert not pad_regions(items, 5, shared=False)["features"].is_shared()
    assert not pad_regions(items, 5)["features"].is_shared()  # the main process: private memory
    assert torch.equal(pad_regions(items, 5, shared=True)["features"], pad_regions(items, 5)["features"])

    def shared_in_worker(batch: list[int]) -> torch.Tensor:
        return torch.tensor(pad_regions([store.get_stored(i) for i in batch], 5)["features"].is_shared())

    loader = DataLoader(list(COUNTS), batch_size=3, collate_fn=shared_in_worker, num_workers=1)
    assert [bool(flag) for flag in loader] == [True, True]


def test_float16_and_float32_items_make_a_float32_batch(written) -> None:
    store, values = written
    out = pad_regions([store.get_stored(10), store.get(20)], 5)
    assert out["features"].dtype == torch.float32
    assert np.array_equal(out["features"].numpy(), expected_features(values, [10, 20], 5))


def test_batch_to_device_widens_only_float16_tensors() -> None:
    half = torch.tensor([[1.5, -0.0, 65504.0, 6e-8]], dtype=torch.float16)
    batch = {"features": half, "boxes": torch.tensor([0.25]), "tokens": torch.tensor([3]), "references": [["a"]]}
    out = batch_to_device(batch, CPU)
    assert out["features"].dtype == torch.float32
    assert out["features"].tolist() == [[1.5, -0.0, 65504.0, 5.960464477539063e-08]]  # 6e-8 is 2**-24 in float16
    assert torch.signbit(out["features"][0, 1])
    assert out["boxes"].dtype == torch.float32 and out["tokens"].dtype == torch.long
    assert out["references"] == [["a"]]


def test_a_cache_hands_out_what_it_keeps_and_the_stored_dtype_of_what_it_does_not(written) -> None:
    store, values = written
    keeping = CachedStore(store, 1 << 20)
    first = keeping.get_stored(20)
    assert first.features.dtype == np.float32 and keeping.get_stored(20) is first
    through = CachedStore(store, 64)  # smaller than the store: read through
    through.get(10)
    assert through.caching is False
    assert through.get_stored(20).features.dtype == np.float16
    assert np.array_equal(through.get_stored(20).features.astype(np.float32), values[20])
