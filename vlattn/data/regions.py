"""Batching of variable-length region sets into padded tensors with a mask.

A DataLoader worker hands each batch to the main process through shared memory. :func:`pad_regions` writes the
features of a batch straight into shared memory when it runs in a worker (one write; a batch built in private memory
is copied there again when it is sent), and keeps them in the items' dtype: float16 when every item's features are
(:func:`~vlattn.data.features.base.stored_regions`, a memmap store's dtype), half the bytes to write and hand over.
:func:`batch_to_device` widens them to float32 where the batch is used (on the GPU when training there); float16 ->
float32 is exact, so the widened batch equals the one built from float32 items bit for bit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from vlattn.data.features.base import FeatureStore, RegionFeatures, stored_regions
from vlattn.data.features.readahead import prefetch
from vlattn.data.handover import Shared, SlotArena
from vlattn.errors import DataError


def pad_regions(
    items: list[RegionFeatures], max_regions: int, shared: Shared = None
) -> dict[str, torch.Tensor]:
    """Stack the regions of B images, keeping at most ``max_regions`` per image (the first ones:
    detectors emit regions sorted by confidence).

    Returns ``features`` (B, N, D) float32 (float16 when every item's features are float16: see the module notes),
    ``boxes`` (B, N, 4) float32, ``sizes`` (B, 2) float32 (width, height) and ``region_mask`` (B, N) bool
    (True = real region), where N = min(max_regions, largest region count in the batch); padding is zero.
    ``features`` lie in shared memory when ``shared`` (default: when called in a DataLoader worker); in the slot
    when ``shared`` is one (:class:`~vlattn.data.handover.SlotArena`) with room for them.
    """
    if not items:
        raise DataError("cannot pad an empty batch of regions")
    if max_regions < 1:
        raise DataError(f"max_regions must be >= 1, got {max_regions}")
    dims = {item.features.shape[1] for item in items}
    if len(dims) != 1:
        raise DataError(f"images in one batch have different feature dimensions {sorted(dims)}")
    counts = [min(item.num_regions, max_regions) for item in items]
    batch, length, dim = len(items), max(counts), dims.pop()
    half = all(item.features.dtype == np.float16 for item in items)
    shared = get_worker_info() is not None if shared is None else shared
    out = _empty((batch, length, dim), torch.float16 if half else torch.float32, shared)
    features = out.numpy()
    boxes = np.zeros((batch, length, 4), dtype=np.float32)
    mask = np.zeros((batch, length), dtype=bool)
    for row, (item, count) in enumerate(zip(items, counts)):
        features[row, :count] = item.features[:count]
        features[row, count:] = 0
        boxes[row, :count] = item.boxes[:count]
        mask[row, :count] = True
    sizes = np.asarray([(item.width, item.height) for item in items], dtype=np.float32)
    return {
        "features": out,
        "boxes": torch.from_numpy(boxes),
        "sizes": torch.from_numpy(sizes),
        "region_mask": torch.from_numpy(mask),
    }


def _empty(shape: tuple[int, ...], dtype: torch.dtype, shared: bool | SlotArena) -> torch.Tensor:
    """An uninitialised tensor, in shared memory when ``shared``: in the slot ``shared`` if it has room, else
    allocated there directly (as torch's ``default_collate`` does in a worker), not moved there by a copy when the
    batch is sent."""
    if isinstance(shared, SlotArena) and (tensor := shared.empty(shape, dtype)) is not None:
        return tensor
    if not shared:
        return torch.empty(shape, dtype=dtype)
    numel = int(np.prod(shape))
    storage = torch.UntypedStorage._new_shared(numel * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


def batch_to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """The tensors of ``batch`` moved to ``device`` (non-blocking: from pinned memory the copy overlaps), float16
    ones then widened to float32 there (features kept in the store's dtype: see the module notes); other values
    as they are."""
    moved = {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}
    return {k: v.float() if torch.is_tensor(v) and v.dtype == torch.float16 else v for k, v in moved.items()}


def normalize_boxes(boxes: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """Pixel boxes (B, N, 4) x1y1x2y2 -> fractions of each image's width/height (sizes (B, 2)); zeros stay zero.

    Models receive boxes in this form: absolute positions become comparable across image sizes, and
    relative geometry (NG-SAN) is unchanged by the scaling.
    """
    scale = sizes.repeat(1, 2)[:, None, :].clamp(min=1.0)  # (B, 1, 4): w, h, w, h
    return boxes / scale


def first_regions(store: FeatureStore, image_id: int, max_regions: int, stored: bool = False) -> RegionFeatures:
    """Regions of ``image_id`` cut to the first ``max_regions`` (datasets cut early, collation pads); ``stored``:
    the features in the store's dtype (:func:`~vlattn.data.features.base.stored_regions`), else float32."""
    regions = stored_regions(store, image_id) if stored else store.get(image_id)
    if regions.num_regions <= max_regions:
        return regions
    return RegionFeatures(regions.features[:max_regions], regions.boxes[:max_regions], regions.width, regions.height)


class BatchReadahead(Dataset):
    """Base of map-style datasets whose items read regions from ``self.store``: a DataLoader fetching a batch
    calls ``__getitems__``, which hints the read-ahead of all the batch's images (:mod:`.features.readahead`) and
    then returns the items ``self[i]`` in the order of ``indices``. Subclasses say which images the items read."""

    store: FeatureStore

    def image_ids_at(self, indices: list[int]) -> list[int]:
        """The ids of the images the items of ``indices`` read, item by item (several for an item of several
        images)."""
        raise NotImplementedError

    def __getitems__(self, indices: list[int]) -> list[Any]:
        prefetch(self.store, self.image_ids_at(indices))
        return [self[index] for index in indices]


class ReadaheadBatches:
    """The batches of ``batches`` (a batch sampler: lists of item indices of ``dataset``), the same in the same
    order, each handed out once the read-ahead of the batch ``ahead`` places later has been hinted
    (:meth:`BatchReadahead.__getitems__` hints each batch again as it is read): with a cold page cache the disk reads
    the next batch while this one is decoded, collated and stepped on. Pass it as a DataLoader's ``batch_sampler``;
    with workers the main process hints, and the page cache it fills is the workers' too."""

    def __init__(self, batches: Sequence[list[int]], dataset: BatchReadahead, ahead: int = 1) -> None:
        if ahead < 1:
            raise ValueError(f"ahead must be >= 1, got {ahead}")
        self.batches, self.dataset, self.ahead = batches, dataset, ahead

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        pending: deque[list[int]] = deque()
        for batch in self.batches:
            prefetch(self.dataset.store, self.dataset.image_ids_at(batch))
            pending.append(batch)
            if len(pending) > self.ahead:
                yield pending.popleft()
        yield from pending


class RegionSampler:
    """Seeded random draws of the region features a model sees (the first ``max_regions`` of each image) from
    the images ``image_ids`` of ``store`` — e.g. the training images, for data-dependent initialisation
    (k-means dictionaries) without reading a whole COCO-size store."""

    def __init__(self, store: FeatureStore, image_ids: list[int], max_regions: int) -> None:
        if not image_ids:
            raise DataError("no images to sample regions from", path=store.path)
        self.store, self.image_ids, self.max_regions = store, list(image_ids), max_regions

    @property
    def dim(self) -> int:
        """D, the feature size."""
        return self.store.dim

    def stream(self, count: int, generator: torch.Generator, chunk_rows: int = 8192) -> Iterator[np.ndarray]:
        """The rows of :meth:`sample` in (about ``chunk_rows``, D) float32 chunks of whole images, read lazily: a
        consumer that stops early reads no further images (k-means over COCO-size stores)."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        order = torch.randperm(len(self.image_ids), generator=generator).tolist()
        pending, pending_rows, total = [], 0, 0
        for index in order:
            if total >= count:
                break
            features = first_regions(self.store, self.image_ids[index], self.max_regions).features
            pending.append(features[: count - total])
            total += len(pending[-1])
            pending_rows += len(pending[-1])
            if pending_rows >= chunk_rows:
                yield np.concatenate(pending).astype(np.float32, copy=False)
                pending, pending_rows = [], 0
        if pending:
            yield np.concatenate(pending).astype(np.float32, copy=False)

    def sample(self, count: int, generator: torch.Generator) -> torch.Tensor:
        """(n, D) float32 with n = min(count, regions of all images): all regions of images drawn without
        replacement (order from ``generator``) until ``count`` are collected; the last image drawn gives its
        first regions only. Deterministic for a generator state."""
        return torch.from_numpy(np.concatenate(list(self.stream(count, generator))))
