"""Captioning datasets over Karpathy entries and a feature store, and their collate functions.

Items keep at most ``max_regions`` regions per image (the first ones), so collation pads to the
largest count in the batch.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from vlattn.data.features.base import FeatureStore
from vlattn.data.features.checks import require_ids
from vlattn.data.handover import Shared
from vlattn.data.karpathy import ImageEntry
from vlattn.data.packed import PackedTexts
from vlattn.data.regions import BatchReadahead, first_regions, normalize_boxes, pad_regions
from vlattn.data.vocab import Vocabulary
from vlattn.errors import DataError


def _check_entries(entries: Sequence[ImageEntry], store: FeatureStore, feature_dim: int | None) -> None:
    """Entries are non-empty and all present in ``store`` with the expected feature dimension."""
    if not entries:
        raise DataError("no images given to the dataset (is the split empty in the Karpathy file?)")
    require_ids(store, (entry.image_id for entry in entries), feature_dim)


class CaptionTrainSet(BatchReadahead):
    """One item per (image, caption) pair: ``{"image_id", "regions", "tokens"}`` with ``tokens`` the
    caption's word indices (no BOS/EOS) truncated to ``max_len``.

    The captions are encoded once into flat arrays (:mod:`vlattn.data.packed`): items are read without touching a
    Python object per caption, so forked DataLoader workers keep sharing the parent's memory. ``stored_dtype``:
    the items' features in the store's dtype (float16 from a memmap store; :func:`~.regions.first_regions`), for a
    consumer that widens them (:func:`~.regions.batch_to_device`), else float32.
    """

    def __init__(
        self,
        entries: Sequence[ImageEntry],
        store: FeatureStore,
        vocab: Vocabulary,
        max_regions: int,
        max_len: int,
        feature_dim: int | None = None,
        stored_dtype: bool = False,
    ) -> None:
        _check_entries(entries, store, feature_dim)
        self.store, self.vocab, self.stored_dtype = store, vocab, stored_dtype
        self.max_regions, self.max_len = max_regions, max_len
        self.image_ids = np.fromiter((entry.image_id for entry in entries), dtype=np.int64, count=len(entries))
        per_image = np.fromiter((len(entry.captions) for entry in entries), dtype=np.int64, count=len(entries))
        self.caption_image = np.repeat(np.arange(len(entries), dtype=np.int64), per_image)  # (P,) image of pair
        self.words, self.offsets = vocab.encode_flat([caption for entry in entries for caption in entry.captions])

    def __len__(self) -> int:
        return len(self.caption_image)

    def lengths(self) -> list[int]:
        """The number of words of each item's ``tokens`` (what a batch is padded to), in item order."""
        return np.minimum(np.diff(self.offsets), self.max_len).tolist()

    def image_ids_at(self, indices: list[int]) -> list[int]:
        return self.image_ids[self.caption_image[indices]].tolist()

    def __getitem__(self, index: int) -> dict[str, Any]:
        image_id = int(self.image_ids[self.caption_image[index]])
        start = int(self.offsets[index])
        end = min(int(self.offsets[index + 1]), start + self.max_len)
        return {
            "image_id": image_id,
            "regions": first_regions(self.store, image_id, self.max_regions, self.stored_dtype),
            "tokens": self.words[start:end].tolist(),
        }


class CaptionEvalSet(BatchReadahead):
    """One item per image: ``{"image_id", "regions", "references"}`` (the raw reference strings).

    ``entries`` are kept for callers; items are read from arrays (:class:`~vlattn.data.packed.PackedTexts`), as
    :class:`CaptionTrainSet`'s are, so forked DataLoader workers (SCST) keep sharing the parent's memory;
    ``stored_dtype`` as there.
    """

    def __init__(
        self, entries: Sequence[ImageEntry], store: FeatureStore, max_regions: int, feature_dim: int | None = None,
        stored_dtype: bool = False,
    ) -> None:
        _check_entries(entries, store, feature_dim)
        self.entries, self.store, self.max_regions = list(entries), store, max_regions
        self.stored_dtype = stored_dtype
        self.image_ids = np.fromiter((entry.image_id for entry in entries), dtype=np.int64, count=len(entries))
        self.references = PackedTexts([entry.raw for entry in entries])

    def __len__(self) -> int:
        return len(self.image_ids)

    def image_ids_at(self, indices: list[int]) -> list[int]:
        return self.image_ids[indices].tolist()

    def __getitem__(self, index: int) -> dict[str, Any]:
        image_id = int(self.image_ids[index])
        return {
            "image_id": image_id,
            "regions": first_regions(self.store, image_id, self.max_regions, self.stored_dtype),
            "references": self.references[index],
        }


def collate_regions(batch: Sequence[dict[str, Any]], shared: Shared = None) -> dict[str, Any]:
    """``image_ids`` (B,) long plus the :func:`pad_regions` tensors of the items' ``regions`` (``shared`` as
    there), with ``boxes`` normalised to fractions of the image size (:func:`normalize_boxes`) as models expect."""
    regions = [item["regions"] for item in batch]
    out: dict[str, Any] = {"image_ids": torch.tensor([item["image_id"] for item in batch], dtype=torch.long)}
    out.update(pad_regions(regions, max(1, max(r.num_regions for r in regions)), shared))
    out["boxes"] = normalize_boxes(out["boxes"], out["sizes"])
    return out


def collate_train(batch: Sequence[dict[str, Any]], shared: Shared = None) -> dict[str, Any]:
    """Training batch: :func:`collate_regions` plus ``tokens`` (B, T + 2) long = [BOS w1 .. wn EOS PAD ..]."""
    out = collate_regions(batch, shared)
    width = max(len(item["tokens"]) for item in batch) + 2
    rows = [[Vocabulary.BOS, *item["tokens"], Vocabulary.EOS] + [Vocabulary.PAD] * (width - len(item["tokens"]) - 2)
            for item in batch]
    out["tokens"] = torch.tensor(rows, dtype=torch.long)  # one conversion for the batch
    return out


def collate_eval(batch: Sequence[dict[str, Any]], shared: Shared = None) -> dict[str, Any]:
    """Evaluation batch: :func:`collate_regions` plus ``references`` (list of B lists of strings)."""
    out = collate_regions(batch, shared)
    out["references"] = [item["references"] for item in batch]
    return out
