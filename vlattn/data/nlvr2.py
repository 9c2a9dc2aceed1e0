"""NLVR2 (Suhr et al. 2019): a statement about a pair of images, true or false. Read in the layout of LXMERT's
preprocessed files (``data/nlvr2/{train,valid,test}.json``): a JSON list of ``{"identifier", "img0", "img1",
"sent", "label"}`` with ``img0`` the left and ``img1`` the right image, ``label`` 1 (true) or 0 (absent in an
unlabelled split). The image ids must be the integer ids of the feature store (NLVR2's own are strings such as
``train-10171-0-img0``: renumber them with the store).

The metrics (NLVR2's ``metrics.py``): accuracy, and consistency — the fraction of sentences all of whose image
pairs are judged right, a sentence being the examples whose ``identifier`` (``split-set-pair-sentence``) agree
but for the pair.

Items: ``{"identifier", "regions": (left, right), "question"}`` + ``"label"``; :func:`collate_nlvr2` stacks them as
the pair model reads them: ``features`` (B, 2, N, D), ``boxes`` (B, 2, N, 4) normalised, ``region_mask`` (B, 2, N),
``questions`` / ``question_mask`` (B, L), ``labels`` (B,) long.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vlattn.data.captioning import collate_regions
from vlattn.data.features.base import FeatureStore
from vlattn.data.features.checks import require_ids
from vlattn.data.handover import Shared
from vlattn.data.jsonfiles import read_json
from vlattn.data.regions import BatchReadahead, first_regions
from vlattn.data.vocab import Vocabulary
from vlattn.data.vqa import encode_question
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.errors import DataError


@dataclass(frozen=True)
class Statement:
    """One example: ``images`` (left, right), ``sentence``, ``label`` (1 true, 0 false, None unlabelled)."""

    identifier: str
    images: tuple[int, int]
    sentence: str
    label: int | None


def load_statements(path: Path) -> list[Statement]:
    """The examples of one file (see the module docstring); errors name the file and the example."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError("expected a JSON list of NLVR2 examples", path=path)
    statements, seen = [], set()
    for index, record in enumerate(data):
        item = f"example {index}"
        if not isinstance(record, dict) or not isinstance(record.get("identifier"), str):
            raise DataError("expected an object with an identifier", path=path, item=item)
        item = record["identifier"]
        if item in seen:
            raise DataError("identifier appears twice", path=path, item=item)
        seen.add(item)
        images = (record.get("img0"), record.get("img1"))
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in images):
            raise DataError(f"img0/img1 must be integer ids of the feature store, got {images}", path=path, item=item)
        label = record.get("label")
        if label not in (0, 1, None) or isinstance(label, bool):
            raise DataError(f"label must be 0 or 1, got {label!r}", path=path, item=item)
        if not isinstance(record.get("sent"), str) or not record["sent"].strip():
            raise DataError("empty statement", path=path, item=item)
        statements.append(Statement(item, (images[0], images[1]), record["sent"], label))
    if not statements:
        raise DataError("no examples", path=path)
    return statements


def sentence_key(identifier: str) -> str:
    """The sentence an example belongs to: its identifier without the pair number."""
    parts = identifier.split("-")
    return "-".join(parts[:-2] + parts[-1:]) if len(parts) >= 4 else identifier


def nlvr2_metrics(predictions: Mapping[str, int], statements: Sequence[Statement]) -> dict[str, float]:
    """``accuracy`` and ``consistency`` in percent over the labelled ``statements``."""
    by_sentence: dict[str, list[bool]] = defaultdict(list)
    for s in statements:
        by_sentence[sentence_key(s.identifier)].append(predictions[s.identifier] == s.label)
    right = [ok for oks in by_sentence.values() for ok in oks]
    return {"accuracy": 100.0 * sum(right) / len(right),
            "consistency": 100.0 * sum(all(oks) for oks in by_sentence.values()) / len(by_sentence)}


class NLVR2Dataset(BatchReadahead):
    """Statements with both images' first ``max_regions`` regions and the encoded sentence. ``stored_dtype``: the
    regions' features in the store's dtype (float16 from a memmap store; :func:`~vlattn.data.regions.first_regions`),
    for a consumer that widens them (:func:`~vlattn.data.regions.batch_to_device`), else float32."""

    def __init__(self, statements: Sequence[Statement], store: FeatureStore, words: Vocabulary | WordPieceVocabulary,
                 max_regions: int, max_question_len: int, stored_dtype: bool = False) -> None:
        self.statements = list(statements)
        self.store, self.words, self.max_regions, self.max_question_len = store, words, max_regions, max_question_len
        self.stored_dtype = stored_dtype
        require_ids(store, sorted({i for s in self.statements for i in s.images}), None)

    def __len__(self) -> int:
        return len(self.statements)

    def image_ids_at(self, indices: list[int]) -> list[int]:
        """Both images of each statement of ``indices``, left then right."""
        return [image_id for index in indices for image_id in self.statements[index].images]

    def __getitem__(self, index: int) -> dict[str, Any]:
        s = self.statements[index]
        item: dict[str, Any] = {
            "identifier": s.identifier,
            "image_ids": s.images,
            "regions": tuple(first_regions(self.store, i, self.max_regions, self.stored_dtype) for i in s.images),
            "question": encode_question(self.words, s.sentence, self.max_question_len),
        }
        if s.label is not None:
            item["label"] = s.label
        return item


def collate_nlvr2(batch: Sequence[dict[str, Any]], shared: Shared = None) -> dict[str, Any]:
    """The batch the pair model reads (see the module docstring), plus ``identifiers``; ``shared`` as in
    :func:`~vlattn.data.captioning.collate_regions`."""
    flat = [{"image_id": i, "regions": r} for item in batch for i, r in zip(item["image_ids"], item["regions"])]
    regions = collate_regions(flat, shared)
    out: dict[str, Any] = {key: regions[key].unflatten(0, (len(batch), 2))
                           for key in ("features", "boxes", "region_mask")}
    out["identifiers"] = [item["identifier"] for item in batch]
    length = max(len(item["question"]) for item in batch)
    questions = torch.zeros(len(batch), length, dtype=torch.long)  # [PAD] = 0
    for row, item in enumerate(batch):
        questions[row, : len(item["question"])] = torch.tensor(item["question"], dtype=torch.long)
    out["questions"], out["question_mask"] = questions, questions != 0
    if "label" in batch[0]:
        out["labels"] = torch.tensor([item["label"] for item in batch], dtype=torch.long)
    return out
