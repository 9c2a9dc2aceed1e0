"""Batches handed from DataLoader workers to the main process in shared memory reused from batch to batch.

Without it a worker hands each batch over in new shared memory: torch moves every tensor of the batch there (or the
collate function writes it there directly, :func:`~vlattn.data.regions.pad_regions`), sends the main process a file
descriptor per tensor, and the main process maps each one. New shared pages cost a page fault each when first
written (about 10 ms for an XE batch of float16 features, as long as reading the batch from the page cache), and each
descriptor a round trip between the processes.

:class:`SharedBatches` wraps a collate function. In a worker, a batch's tensors are laid out one after another in a
*slot*: a block of shared memory the worker keeps and fills again once the main process is done with its batch
(:class:`SlotArena` lets the collate function write its largest tensors there directly); the batch travels as one
descriptor and the tensors' places in it.

When the main process is done: the tensors it receives are views of the slot that all hold one lease object; when
the last tensor viewing the slot is freed (after ``pin_memory`` copied it to page-locked memory, or after the
training step used it), the lease is freed and marks the slot free in the slot's first byte, which the worker reads
before it fills the slot again. A batch kept longer (in a list, say) keeps its slot; a worker that finds none of its
slots free hands the batch over in new shared memory as without slots. Either way the batch holds the values the
collate function produced; only where they lie differs.

The main process keeps each slot it has received mapped while the :class:`SharedBatches` that made it lives (at most
``slots`` per worker: a slot made anew replaces the one at its place), so that the next batch in the slot finds it
mapped: mapping the slot again for every batch would cost a page fault per 4 KiB when the batch is first read (about
1 ms per XE batch of float16 features, in the process that also runs the training step).
"""

from __future__ import annotations

import inspect
import itertools
import math
import weakref
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import get_worker_info

SLOTS = 4  # per worker: a batch being built, two queued (the DataLoader's prefetch), one in the main process's step
_HEADER = 64  # bytes before a slot's tensors; byte 0 is 1 from filling until the main process frees the batch
_ALIGN = 64
_Place = tuple[int, torch.dtype, tuple[int, ...]]  # a tensor's offset in its slot (bytes), dtype and shape
_Owner = tuple[int, int, int]  # a slot's SharedBatches (its number in the main process), worker id, place in the ring
# In the main process: per SharedBatches (by number), the slots received, by (worker id, place in the worker's ring)
_MAPPED: dict[int, dict[tuple[int, int], torch.UntypedStorage]] = {}
_NUMBERS = itertools.count()


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


class SlotArena:
    """Space for one batch's tensors in a slot of shared memory (in the worker that fills it)."""

    def __init__(self, nbytes: int, owner: _Owner | None = None) -> None:
        self.owner = owner  # whose slot it is, for the main process to keep it mapped (None: not kept)
        self.storage = torch.UntypedStorage._new_shared(_HEADER + nbytes)
        self.flat = torch.empty(0, dtype=torch.uint8).set_(self.storage)  # (HEADER + nbytes,) the slot's bytes
        self.capacity = nbytes
        self.used = _HEADER

    @property
    def free(self) -> bool:
        """Whether no batch of this slot is held by the main process (nor on its way there)."""
        return int(self.flat[0]) == 0

    def claim(self) -> None:
        """Start filling this slot with a new batch."""
        self.flat[0] = 1
        self.used = _HEADER

    def release(self) -> None:
        """Mark the slot free (what the main process does when it frees the slot's batch)."""
        self.flat[0] = 0

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        """An uninitialised contiguous tensor in the slot after those allocated since :meth:`claim`, or None when
        the slot has no room left for it."""
        start = _aligned(self.used)
        end = start + math.prod(shape) * dtype.itemsize
        if end > self.storage.nbytes():
            return None
        self.used = end
        return self.flat[start:end].view(dtype).view(shape)

    def offset_of(self, tensor: torch.Tensor) -> int | None:
        """Where the contiguous ``tensor`` lies in the slot (bytes from its start), or None when it lies elsewhere."""
        if not tensor.is_contiguous() or tensor.untyped_storage().data_ptr() != self.storage.data_ptr():
            return None
        return tensor.data_ptr() - self.storage.data_ptr()

    def pack(self, batch: dict[str, Any]) -> _SlotBatch:
        """``batch`` with its tensors in the slot (those the collate function did not write there copied in; one
        without room left where it is), ready to be sent to the main process."""
        places: dict[str, _Place] = {}
        others: dict[str, Any] = {}
        for key, value in batch.items():
            offset = self.offset_of(value) if torch.is_tensor(value) and value.device.type == "cpu" else None
            if offset is None and torch.is_tensor(value) and value.device.type == "cpu":
                copy = self.empty(tuple(value.shape), value.dtype)
                if copy is not None:
                    copy.copy_(value)
                    offset = self.offset_of(copy)
            if offset is None:
                others[key] = value
            else:
                places[key] = (offset, value.dtype, tuple(value.shape))
        return _SlotBatch(self.storage, self.owner, list(batch), places, others)


# What a collate function's ``shared`` takes: True/False (tensors in new shared memory or not; None: as the
# process decides, True in a DataLoader worker) or the slot to write them into
Shared = bool | SlotArena | None


class _SlotBatch:
    """A batch on its way from a worker: the slot's storage (pickled as torch shares storages: one descriptor) and
    owner, where each tensor lies in it, and the batch's other values."""

    def __init__(self, storage: torch.UntypedStorage, owner: _Owner | None, order: list[str],
                 places: dict[str, _Place], others: dict[str, Any]) -> None:
        self.storage, self.owner, self.order, self.places, self.others = storage, owner, order, places, others

    def __reduce__(self) -> tuple[Callable[..., dict[str, Any]], tuple[Any, ...]]:
        return _receive, (self.storage, self.owner, self.order, self.places, self.others)


class _Lease:
    """What every tensor of a received batch holds (through numpy's view of it): freed with the last of them."""

    def __init__(self, storage: torch.UntypedStorage) -> None:
        self.storage = storage
        self.__array_interface__ = {"shape": (storage.nbytes(),), "typestr": "|u1",
                                    "data": (storage.data_ptr(), False), "version": 3}


def _receive(storage: torch.UntypedStorage, owner: _Owner | None, order: list[str], places: dict[str, _Place],
             others: dict[str, Any]) -> dict[str, Any]:
    """In the main process: the batch, its tensors viewing the slot; the slot is marked free when they are all
    freed. The slot stays mapped while its SharedBatches lives (torch maps a storage it receives again only when no
    object of it is left)."""
    if owner is not None and (kept := _MAPPED.get(owner[0])) is not None:
        kept[owner[1], owner[2]] = storage
    lease = _Lease(storage)
    header = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (1,))  # holds the storage, not the lease
    weakref.finalize(lease, header.fill_, 0)
    flat = torch.from_numpy(np.asarray(lease))  # its storage holds the numpy array, which holds the lease
    del lease
    batch = {}
    for key in order:
        if key in places:
            offset, dtype, shape = places[key]
            batch[key] = flat[offset : offset + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)
        else:
            batch[key] = others[key]
    return batch


class SlotRing:
    """The slots of one worker process: up to ``slots``, made as needed, each as large as the largest batch seen
    (a free slot too small for it is made anew); ``owner``: the SharedBatches' number and the worker id, which the
    slots carry with their place in the ring."""

    def __init__(self, slots: int = SLOTS, owner: tuple[int, int] | None = None) -> None:
        self.slots: list[SlotArena] = []
        self.limit = slots
        self.owner = owner
        self.need = 0  # bytes of the largest batch seen

    def _new(self, index: int) -> SlotArena:
        return SlotArena(self.need, None if self.owner is None else (*self.owner, index))

    def claim(self) -> SlotArena | None:
        """A free slot, claimed, large enough for the largest batch seen; None when all are held (or no batch has
        been seen yet)."""
        if self.need == 0:
            return None
        for index, slot in enumerate(self.slots):
            if slot.free:
                if slot.capacity < self.need:
                    slot = self.slots[index] = self._new(index)
                slot.claim()
                return slot
        if len(self.slots) < self.limit:
            self.slots.append(self._new(len(self.slots)))
            self.slots[-1].claim()
            return self.slots[-1]
        return None

    def retire(self, slot: SlotArena) -> None:
        """Stop using ``slot`` (its memory lives on while anything maps it)."""
        self.slots.remove(slot)

    def seen(self, batch: Any) -> None:
        """Note the room ``batch``'s tensors take (with room for a slightly larger one)."""
        if isinstance(batch, dict):
            tensors = [v for v in batch.values() if torch.is_tensor(v)]
            size = sum(_aligned(v.numel() * v.element_size()) for v in tensors)
            self.need = max(self.need, _aligned(size + size // 8))


class SharedBatches:
    """``collate`` (items -> dict of tensors and other values) whose batches a DataLoader worker hands over in slots
    of shared memory reused from batch to batch (see the module notes); in the main process ``collate`` itself.
    A collate function taking ``shared`` gets the slot (:class:`SlotArena`) there, to write tensors into it."""

    def __init__(self, collate: Callable[..., Any], slots: int = SLOTS) -> None:
        self.collate, self.slots = collate, slots
        try:
            self.takes_arena = "shared" in inspect.signature(collate).parameters
        except (TypeError, ValueError):
            self.takes_arena = False
        self._ring: SlotRing | None = None
        self.number = next(_NUMBERS)  # inherited by the workers: their slots say whose they are
        _MAPPED[self.number] = {}
        weakref.finalize(self, _MAPPED.pop, self.number, None)  # the slots kept mapped go with this object

    def __call__(self, items: list[Any]) -> Any:
        worker = get_worker_info()
        if worker is None:
            return self.collate(items)
        if self._ring is None:
            self._ring = SlotRing(self.slots, (self.number, worker.id))
        slot = self._ring.claim()
        if slot is None:
            batch = self.collate(items)
            self._ring.seen(batch)
            return batch
        try:
            batch = self.collate(items, shared=slot) if self.takes_arena else self.collate(items)
        except BaseException:
            slot.release()  # nothing of it left this process
            raise
        self._ring.seen(batch)
        if isinstance(batch, dict):
            return slot.pack(batch)
        self._ring.retire(slot)  # tensors of it may travel without a lease: never filled again
        return batch
