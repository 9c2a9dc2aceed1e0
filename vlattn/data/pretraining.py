"""Image-sentence pairs for vision-language pretraining (LXMERT, Tan and Bansal 2019, Sec. 3.2): every caption of
a captioning set and every question of a VQA set, each with its image's regions and the detector's labels of those
regions.

A :class:`Pair` is one sentence about one image; a question carries its soft answer scores over the candidate
answers (the targets of the image-QA task), a caption none. :class:`PretrainDataset` items hold the sentence's
``[CLS] WordPiece [SEP]`` ids, the first ``max_regions`` regions and, per region, the object and attribute class
with their scores (:mod:`vlattn.data.features.labels`; 0 scores where the store has none). Masking, mismatching and
the answer drawn for a question happen per batch in the objective (:mod:`vlattn.data.masking`), so that every
epoch corrupts the pairs anew from the run's random state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlattn.data.captioning import collate_regions
from vlattn.data.features.base import FeatureStore
from vlattn.data.features.checks import require_ids
from vlattn.data.features.labels import region_labels
from vlattn.data.handover import Shared
from vlattn.data.karpathy import ImageEntry
from vlattn.data.regions import BatchReadahead, first_regions
from vlattn.data.vqa import VQASplit
from vlattn.data.vqa_answers import AnswerVocabulary
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.errors import DataError

IGNORE = -100  # a label no loss counts (PyTorch's cross-entropy default)


@dataclass(frozen=True)
class Pair:
    """One sentence about one image; ``answers`` {candidate index: soft score} for a question with a candidate
    among its human answers, else None (captions, unanswerable questions)."""

    image_id: int
    text: str
    answers: dict[int, float] | None = None

    @property
    def answered(self) -> bool:
        return bool(self.answers)


def caption_pairs(entries: Iterable[ImageEntry], split: str) -> list[Pair]:
    """Every raw caption of the Karpathy entries of ``split``."""
    return [Pair(e.image_id, text) for e in entries if e.split == split for text in e.raw]


def question_pairs(split: VQASplit, answers: AnswerVocabulary) -> list[Pair]:
    """Every question of ``split`` with the soft scores of its human answers (VQA's official accuracy of each
    candidate) when it has annotations."""
    notes = split.annotations or {}
    pairs = []
    for question in split.questions:
        annotation = notes.get(question.question_id)
        scores = answers.soft_scores(annotation.answers) if annotation is not None else None
        pairs.append(Pair(question.image_id, question.question, scores or None))
    return pairs


class PretrainDataset(BatchReadahead):
    """``pairs`` joined with their images' regions (the first ``max_regions``) and region labels.

    Item: ``image_id``, ``regions``, ``text`` (``[CLS] pieces [SEP]`` ids, at most ``max_length``), ``answers``
    (A,) float32 soft scores (zeros for a caption), ``objects``/``attributes`` (N,) int64 classes and their
    ``object_scores``/``attribute_scores`` (N,) float32 (classes :data:`IGNORE` and scores 0 where the store has no
    labels). A class outside ``[0, object_classes)`` (``attribute_classes``) is a ``DataError`` naming the store and
    the image. Every image must be in the store (one error names the missing ids). ``stored_dtype``: the regions'
    features in the store's dtype (float16 from a memmap store; :func:`~vlattn.data.regions.first_regions`), for a
    consumer that widens them (:func:`~vlattn.data.regions.batch_to_device`), else float32."""

    def __init__(self, pairs: Sequence[Pair], store: FeatureStore, words: WordPieceVocabulary, answers: int, *,
                 max_regions: int, max_length: int, object_classes: int, attribute_classes: int,
                 source: str | Path | None = None, stored_dtype: bool = False) -> None:
        if not pairs:
            raise DataError("no image-sentence pairs to pretrain on", path=source or store.path)
        self.pairs, self.store, self.words, self.answers = list(pairs), store, words, answers
        self.max_regions, self.max_length, self.stored_dtype = max_regions, max_length, stored_dtype
        self.classes = {"objects": object_classes, "attributes": attribute_classes}
        require_ids(store, sorted({p.image_id for p in self.pairs}), None)
        self.image_ids = torch.tensor([p.image_id for p in self.pairs], dtype=torch.long)  # (P,)

    def __len__(self) -> int:
        return len(self.pairs)

    def image_ids_at(self, indices: list[int]) -> list[int]:
        return self.image_ids[indices].tolist()

    def text(self, index: int) -> list[int]:
        """The ``[CLS] pieces [SEP]`` ids of pair ``index``'s sentence."""
        return self.words.encode_text(self.pairs[index].text, self.max_length)

    def labels(self, image_id: int, count: int) -> dict[str, np.ndarray]:
        """The first ``count`` regions' classes and scores (IGNORE and 0 where the store has none)."""
        found = region_labels(self.store, image_id)
        out = {"objects": np.full(count, IGNORE, np.int64), "object_scores": np.zeros(count, np.float32),
               "attributes": np.full(count, IGNORE, np.int64), "attribute_scores": np.zeros(count, np.float32)}
        if found is None:
            return out
        for name, classes, scores in (("objects", found.objects, found.object_scores),
                                      ("attributes", found.attributes, found.attribute_scores)):
            if classes is None or scores is None:
                continue
            classes = np.asarray(classes[:count], dtype=np.int64)
            bad = (classes < 0) | (classes >= self.classes[name])
            if bad.any():
                raise DataError(f"region {int(np.argmax(bad))} has {name[:-1]} class {int(classes[bad][0])}, outside "
                                f"the {self.classes[name]} classes of train.pretrain.{name[:-1]}_classes",
                                path=self.store.path, item=image_id)
            out[name], out[name[:-1] + "_scores"] = classes, np.asarray(scores[:count], dtype=np.float32)
        return out

    def __getitem__(self, index: int) -> dict[str, Any]:
        pair = self.pairs[index]
        regions = first_regions(self.store, pair.image_id, self.max_regions, self.stored_dtype)
        target = np.zeros(self.answers, dtype=np.float32)
        for answer, score in (pair.answers or {}).items():
            target[answer] = score
        return {"index": index, "image_id": pair.image_id, "regions": regions, "text": self.text(index),
                "answers": target, **self.labels(pair.image_id, regions.num_regions)}


def pad_texts(texts: Sequence[Sequence[int]], pad: int = WordPieceVocabulary.PAD) -> torch.Tensor:
    """Id sequences -> (B, L) long, padded with ``pad`` to the longest."""
    out = torch.full((len(texts), max(map(len, texts))), pad, dtype=torch.long)
    for row, text in enumerate(texts):
        out[row, : len(text)] = torch.tensor(text, dtype=torch.long)
    return out


def collate_pretrain(batch: Sequence[dict[str, Any]], shared: Shared = None) -> dict[str, Any]:
    """Batch: :func:`~vlattn.data.captioning.collate_regions` (``shared`` as there) plus ``pair_ids`` (B,), ``questions`` (B, L) ids
    padded with ``[PAD]``, ``question_mask`` (B, L), ``answers`` (B, A), and ``objects``, ``attributes`` (B, N)
    long (IGNORE at padded regions) with ``object_scores``, ``attribute_scores`` (B, N) float (0 there)."""
    out = collate_regions(batch, shared)
    out["pair_ids"] = torch.tensor([item["index"] for item in batch], dtype=torch.long)
    out["questions"] = pad_texts([item["text"] for item in batch])
    out["question_mask"] = out["questions"] != WordPieceVocabulary.PAD
    out["answers"] = torch.from_numpy(np.stack([item["answers"] for item in batch]))
    regions = out["region_mask"].shape[1]
    for name, fill in (("objects", IGNORE), ("attributes", IGNORE), ("object_scores", 0.0), ("attribute_scores", 0.0)):
        values = torch.full((len(batch), regions), fill, dtype=torch.long if fill == IGNORE else torch.float32)
        for row, item in enumerate(batch):
            values[row, : len(item[name])] = torch.from_numpy(item[name])
        out[name] = values
    return out
