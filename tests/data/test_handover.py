"""Batches handed over from DataLoader workers in reused slots of shared memory: the batches the collate function
makes, value for value, whether they are dropped as they come or all kept; a slot is filled again only once every
tensor of its batch is freed."""

from __future__ import annotations

import gc
import io
import pickle
import re
from unittest import mock
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from vlattn.data.captioning import CaptionEvalSet, CaptionTrainSet, collate_eval, collate_train
from vlattn.data.features import MemmapStore, RegionFeatures, write_memmap
from vlattn.data.handover import SharedBatches, SlotRing
from vlattn.data.karpathy import ImageEntry
from vlattn.data.vocab import Vocabulary

DIM = 8
COUNTS = {10: 1, 20: 5, 30: 3, 40: 2, 50: 4, 60: 5, 70: 2, 80: 3}  # regions per image
VOCAB = Vocabulary(["a", "cube", "red"])
ENTRIES = [ImageEntry(i, "train", f"{i}.png", [["a", "cube"], ["red", "a", "red"]], ["A cube", "Red"])
           for i in COUNTS]


@pytest.fixture()
def store(tmp_path: Path) -> MemmapStore:
    rng = np.random.default_rng(0)
    items = [(i, RegionFeatures(rng.normal(size=(n, DIM)).astype(np.float32),
                                np.tile(np.array([[0, 0, 8, 8]], dtype=np.float32), (n, 1)), 16, 12))
             for i, n in COUNTS.items()]
    write_memmap(tmp_path / "feats", items)
    return MemmapStore(tmp_path / "feats")


def send(value: object) -> object:
    """``value`` pickled as a DataLoader worker sends it and unpickled as the main process receives it."""
    buffer = io.BytesIO()
    ForkingPickler(buffer, pickle.HIGHEST_PROTOCOL).dump(value)
    return pickle.loads(buffer.getvalue())


def assert_same_batches(expected: list[dict], got: list[dict]) -> None:
    assert len(got) == len(expected)
    for want, batch in zip(expected, got):
        assert list(batch) == list(want)  # the keys in the collate function's order
        for key, value in want.items():
            if torch.is_tensor(value):
                assert batch[key].dtype == value.dtype and batch[key].shape == value.shape, key
                assert torch.equal(batch[key].view(-1).view(torch.uint8), value.view(-1).view(torch.uint8)), key
            else:
                assert batch[key] == value, key


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("task", ["xe", "scst"])
def test_batches_from_workers_are_the_collated_batches(store: MemmapStore, workers: int, keep: bool, task: str) -> None:
    dataset, collate = ((CaptionTrainSet(ENTRIES, store, VOCAB, 4, 20, stored_dtype=True), collate_train)
                        if task == "xe" else (CaptionEvalSet(ENTRIES, store, 4, stored_dtype=True), collate_eval))
    batches = [[0, 3, 5], [1, 2], [4, 6, 7], [8, 9, 10], [11, 12], [13, 14, 15], [2, 7, 1], [0, 5]]
    batches = [[i % len(dataset) for i in b] for b in batches]
    expected = [collate([dataset[i] for i in b], shared=False) for b in batches]
    loader = DataLoader(dataset, batch_sampler=batches, collate_fn=SharedBatches(collate, slots=2),
                        num_workers=workers)
    if keep:  # every batch held: slots run out and batches come in new shared memory; none may be overwritten
        got = list(loader)
    else:  # each batch compared, then dropped: slots are filled again
        got = []
        for batch in loader:
            assert_same_batches(expected[len(got): len(got) + 1], [batch])
            got.append({key: value.clone() if torch.is_tensor(value) else value for key, value in batch.items()})
    assert_same_batches(expected, got)


def collated(seed: int, width: int = 5) -> dict[str, object]:
    generator = torch.Generator().manual_seed(seed)
    return {"features": torch.randn(3, width, DIM, generator=generator).half(),
            "tokens": torch.randint(0, 9, (3, 4), generator=generator),
            "mask": torch.rand(3, width, generator=generator) > 0.5,
            "references": [["a"], ["b", "c"], []]}


def test_a_slot_is_filled_again_only_when_every_tensor_of_its_batch_is_freed() -> None:
    ring = SlotRing(slots=1)
    assert ring.claim() is None  # no batch seen yet: no slot size known
    ring.seen(collated(0))
    slot = ring.claim()
    assert slot is not None
    received = send(slot.pack(collated(1)))
    assert_same_batches([collated(1)], [received])
    assert ring.claim() is None  # the batch is held
    kept = received["mask"][1:]  # a view outlives its batch
    del received
    assert ring.claim() is None
    del kept
    again = ring.claim()
    assert again is slot  # the same memory, filled again
    assert_same_batches([collated(2)], [send(again.pack(collated(2)))])


def test_a_batch_larger_than_the_slots_goes_in_new_memory_and_makes_them_grow() -> None:
    ring = SlotRing(slots=1)
    ring.seen(collated(0, width=2))
    slot = ring.claim()
    assert slot is not None
    large = collated(1, width=40)
    received = send(slot.pack(large))  # the features have no room: they travel as an ordinary tensor
    assert_same_batches([large], [received])
    ring.seen(large)
    del received
    grown = ring.claim()
    assert grown is not None and grown is not slot and grown.capacity >= slot.capacity
    assert_same_batches([large], [send(grown.pack(collated(1, width=40)))])


def test_a_failing_collate_function_leaves_its_slot_free() -> None:
    ring = SlotRing(slots=1)
    ring.seen(collated(0))
    wrapped = SharedBatches(lambda items, shared: 1 / 0)
    wrapped._ring = ring
    with pytest.raises(ZeroDivisionError), mock.patch("vlattn.data.handover.get_worker_info", return_value=object()):
        wrapped([1])
    assert ring.claim() is ring.slots[0]


def stack(items: list[int]) -> dict[str, torch.Tensor] | tuple[torch.Tensor, ...]:
    """A collate function without ``shared``: a dict for even first items, else a tuple."""
    values = torch.tensor(items, dtype=torch.float64)
    return {"v": values, "sq": values**2} if items[0] % 2 == 0 else (values, values**2)


def test_any_collate_function_and_batch_type_pass_through_unchanged() -> None:
    batches = [[0, 1], [1, 2, 3], [2, 3], [3], [4, 5, 6], [5, 6], [6], [7, 8]]
    got = list(DataLoader(list(range(9)), batch_sampler=batches, collate_fn=SharedBatches(stack, slots=1),
                          num_workers=1))
    for batch, items in zip(got, batches):
        values = torch.tensor(items, dtype=torch.float64)
        if isinstance(batch, dict):
            assert items[0] % 2 == 0 and torch.equal(batch["v"], values) and torch.equal(batch["sq"], values**2)
        else:
            assert items[0] % 2 == 1 and torch.equal(batch[0], values) and torch.equal(batch[1], values**2)


def slots_mapped() -> int:
    """Torch's shared memory blocks (their files unlinked) mapped in this process."""
    return sum(1 for line in Path("/proc/self/maps").read_text().splitlines()
               if re.search(r"/torch_\d+_\d+_\d+ \(deleted\)$", line))


def rows(items: list[int]) -> dict[str, torch.Tensor]:
    return {"rows": torch.arange(1000, dtype=torch.float32)[None, :] + torch.tensor(items, dtype=torch.float32)[:, None]}


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
@pytest.mark.parametrize("workers", [1, 2])
def test_the_main_process_keeps_the_slots_mapped_while_their_loader_lives(workers: int) -> None:
    before = slots_mapped()
    batches = [[i, i + 1] for i in range(0, 24, 2)]
    loader = DataLoader(list(range(24)), batch_sampler=batches, collate_fn=SharedBatches(rows, slots=2),
                        num_workers=workers)
    mapped = []
    for index, batch in enumerate(loader):
        assert torch.equal(batch["rows"], rows(batches[index])["rows"])
        del batch  # the batch freed: its slot stays mapped, to be received again without mapping it anew
        mapped.append(slots_mapped() - before)
    assert len(mapped) == len(batches)
    assert min(mapped[2:]) >= 1  # the first batch of each worker comes before any slot
    assert max(mapped) <= 4 * workers  # at most 2 slots of each worker kept, 2 batches of each in flight
    del loader
    gc.collect()
    assert slots_mapped() == before  # the slots go with their loader
