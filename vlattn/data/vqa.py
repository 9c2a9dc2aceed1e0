"""VQA v2 files (questions and annotations), their writers, and a dataset joining them with a feature store.

Questions (``v2_OpenEnded_mscoco_<subtype>_questions.json``):
``{"info", "task_type", "data_type", "data_subtype", "license",
"questions": [{"image_id", "question", "question_id"}]}``.
Annotations (``v2_mscoco_<subtype>_annotations.json``): ``{"info", "data_type", "data_subtype", "license",
"annotations": [{"question_id", "image_id", "question_type", "answer_type", "multiple_choice_answer",
"answers": [{"answer", "answer_confidence", "answer_id"}] x 10}]}``.
The answer vocabulary lives in :mod:`vlattn.data.vqa_answers`; the official answer normalisation and
accuracy in :mod:`vlattn.metrics.vqa` (re-exported here).

Questions are split into words as MCAN does (Yu et al. 2019, released ``core/data/data_utils.py``): lower
case, the characters ``. , ' ! ? " ( ) * # : ;`` deleted, ``-`` and ``/`` replaced by spaces, split on
whitespace (``"What's the man-made object?"`` -> ``whats the man made object``); the first
``max_question_len`` (14) words are kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field as dataclass_field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from vlattn.data.captioning import collate_regions
from vlattn.data.features.base import FeatureStore, RegionFeatures
from vlattn.data.features.checks import require_ids
from vlattn.data.handover import Shared
from vlattn.data.regions import BatchReadahead, first_regions
from vlattn.data.jsonfiles import field, read_json, write_json
from vlattn.data.packed import PackedTexts, flat_offsets
from vlattn.data.vocab import Vocabulary
from vlattn.data.vqa_answers import AnswerVocabulary
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.errors import DataError
from vlattn.metrics.vqa import normalize_answer, vqa_accuracy

__all__ = [
    "Annotation",
    "AnswerVocabulary",
    "Question",
    "VQASplit",
    "VQADataset",
    "build_question_vocabulary",
    "collate_vqa",
    "encode_question",
    "load_annotations",
    "load_split",
    "load_questions",
    "normalize_answer",
    "question_tokens",
    "vqa_accuracy",
    "write_annotations",
    "write_questions",
]

UNANSWERABLE = ("skip", "keep", "error")
_QUESTION_DELETED = re.compile(r"[.,'!?\"()*#:;]")


def question_tokens(text: str) -> list[str]:
    """MCAN's question words (see the module docstring), not truncated."""
    return _QUESTION_DELETED.sub("", text.lower()).replace("-", " ").replace("/", " ").split()
_LICENSE = {"name": "unspecified", "url": ""}


@dataclass
class Question:
    """One question about one image."""

    question_id: int
    image_id: int
    question: str


@dataclass
class Annotation:
    """Human answers to one question (``answers`` normally 10, ``confidences`` yes/maybe/no or empty)."""

    question_id: int
    image_id: int
    question_type: str
    answer_type: str
    multiple_choice_answer: str
    answers: list[str]
    confidences: list[str] = dataclass_field(default_factory=list)


def load_questions(path: str | Path) -> list[Question]:
    """Questions of a VQA v2 questions file, in file order."""
    records = field(read_json(path), "questions", list, path=path, item="top level")
    questions = []
    for index, record in enumerate(records):
        question_id = field(record, "question_id", int, path=path, item=f"questions[{index}]")
        where = f"question {question_id}"
        text = field(record, "question", str, path=path, item=where)
        if not question_tokens(text):
            raise DataError("empty question", path=path, item=where)
        questions.append(Question(question_id, field(record, "image_id", int, path=path, item=where), text))
    return questions


def _parse_annotation(record: Any, index: int, path: str | Path) -> Annotation:
    question_id = field(record, "question_id", int, path=path, item=f"annotations[{index}]")
    where = f"question {question_id}"
    answers = field(record, "answers", list, path=path, item=where)
    if not answers:
        raise DataError("no human answers", path=path, item=where)
    texts = [field(a, "answer", str, path=path, item=f"{where} answers[{k}]") for k, a in enumerate(answers)]
    return Annotation(
        question_id=question_id,
        image_id=field(record, "image_id", int, path=path, item=where),
        question_type=str(record.get("question_type", "")),
        answer_type=str(record.get("answer_type", "")),
        multiple_choice_answer=field(record, "multiple_choice_answer", str, path=path, item=where),
        answers=texts,
        confidences=[str(a.get("answer_confidence", "")) for a in answers],
    )


def load_annotations(path: str | Path) -> dict[int, Annotation]:
    """Annotations of a VQA v2 annotations file, keyed by question id."""
    records = field(read_json(path), "annotations", list, path=path, item="top level")
    annotations: dict[int, Annotation] = {}
    for index, record in enumerate(records):
        annotation = _parse_annotation(record, index, path)
        if annotation.question_id in annotations:
            raise DataError("duplicate annotation", path=path, item=f"question {annotation.question_id}")
        annotations[annotation.question_id] = annotation
    return annotations


def _header(data_subtype: str) -> dict[str, Any]:
    info = {"description": "VQA v2 layout written by vlattn", "version": "2.0"}
    return {"info": info, "data_type": "mscoco", "data_subtype": data_subtype, "license": _LICENSE}


def write_questions(path: str | Path, questions: Sequence[Question], *, data_subtype: str = "train2014") -> None:
    """Write a VQA v2 (Open-Ended) questions file atomically."""
    records = [{"image_id": q.image_id, "question": q.question, "question_id": q.question_id} for q in questions]
    write_json(path, {**_header(data_subtype), "task_type": "Open-Ended", "questions": records})


def write_annotations(path: str | Path, annotations: Sequence[Annotation], *, data_subtype: str = "train2014") -> None:
    """Write a VQA v2 annotations file atomically (without ``confidences``, each answer's is ``"yes"``)."""
    for a in annotations:
        if a.confidences and len(a.confidences) != len(a.answers):
            raise DataError("answers and confidences differ in length", path=path, item=f"question {a.question_id}")
    records = [
        {
            "question_id": a.question_id,
            "image_id": a.image_id,
            "question_type": a.question_type,
            "answer_type": a.answer_type,
            "multiple_choice_answer": a.multiple_choice_answer,
            "answers": [
                {"answer": text, "answer_confidence": confidence, "answer_id": k + 1}
                for k, (text, confidence) in enumerate(zip(a.answers, a.confidences or ["yes"] * len(a.answers)))
            ],
        }
        for a in annotations
    ]
    write_json(path, {**_header(data_subtype), "annotations": records})


def build_question_vocabulary(questions: Iterable[Question], min_count: int = 1) -> Vocabulary:
    """Words of :func:`question_tokens` over ``questions`` seen at least ``min_count`` times."""
    return Vocabulary.build((question_tokens(q.question) for q in questions), min_count=min_count)


@dataclass
class VQASplit:
    """The questions of one split, read from one or more files (e.g. MCAN's train+val), and their
    annotations; ``annotations`` is None for a split without annotation files (VQA v2 test2015)."""

    name: str
    questions: list[Question]
    annotations: dict[int, Annotation] | None
    sources: list[Path]
    external_ids: dict[int, str] | None = None  # the files' own question ids where they are not integers (GQA)


def load_split(name: str, question_files: Sequence[Path], annotation_files: Sequence[Path]) -> VQASplit:
    """Questions of every file in ``question_files`` and the annotations of ``annotation_files`` (same order).

    A split has annotations for all its files or for none (test); a question id appearing twice is an error.
    """
    present = [path.is_file() for path in annotation_files]
    if any(present) and not all(present):
        missing = annotation_files[present.index(False)]
        raise DataError(f"annotation file missing for split {name!r} (other files of the split have one)", path=missing)
    questions: list[Question] = []
    seen: dict[int, Path] = {}
    for path in question_files:
        for question in load_questions(path):
            if question.question_id in seen:
                raise DataError(f"question id also in {seen[question.question_id]}", path=path,
                                item=f"question {question.question_id}")
            seen[question.question_id] = path
            questions.append(question)
    annotations = None
    if all(present):
        annotations = {}
        for path in annotation_files:
            annotations.update(load_annotations(path))
    sources = list(annotation_files) if annotations is not None else list(question_files)
    return VQASplit(name, questions, annotations, sources)


class VQADataset(BatchReadahead):
    """Questions joined with their annotations (optional, e.g. for test) and image regions.

    Item: ``{"question_id", "image_id", "regions", "question"}`` (word indices of
    :func:`question_tokens`, at most ``max_question_len``) plus ``"target"`` (A,) float32 soft scores when
    annotations are given. A question none of whose human answers is a candidate of ``answers`` is handled
    by ``unanswerable``: ``"skip"`` drops it and counts it in :attr:`skipped` (usual for training),
    ``"keep"`` keeps it with an all-zero target (honest evaluation: it scores what it scores), ``"error"``
    raises. ``source`` names the annotation file in errors. Every image must be in the store (one error
    names the missing ids). ``zero_image`` replaces every region's features and box by zeros (the
    question-only ablation: the same model, no information from the image). ``stored_dtype``: the items'
    features in the store's dtype (float16 from a memmap store; :func:`~.regions.first_regions`), for a consumer
    that widens them (:func:`~.regions.batch_to_device`), else float32.
    """

    def __init__(
        self,
        questions: Sequence[Question],
        annotations: dict[int, Annotation] | None,
        store: FeatureStore,
        words: Vocabulary | WordPieceVocabulary,
        answers: AnswerVocabulary | None,
        max_regions: int,
        max_question_len: int = 14,
        unanswerable: str = "skip",
        feature_dim: int | None = None,
        source: str | Path | None = None,
        zero_image: bool = False,
        stored_dtype: bool = False,
    ) -> None:
        if unanswerable not in UNANSWERABLE:
            raise DataError(f"unanswerable must be one of {UNANSWERABLE}, got {unanswerable!r}")
        if (annotations is None) != (answers is None):
            raise DataError("annotations and an answer vocabulary go together")
        self.store, self.words, self.answers, self.source = store, words, answers, source
        self.max_regions, self.max_question_len, self.zero_image = max_regions, max_question_len, zero_image
        self.stored_dtype = stored_dtype
        self.questions: list[Question] = []
        self.targets: list[dict[int, float]] = []  # soft targets, computed once (with annotations)
        for question in questions:
            if annotations is None:
                self.questions.append(question)
            elif (scores := self._scores(question, annotations, unanswerable)) is not None:
                self.questions.append(question)
                self.targets.append(scores)
        self.skipped = len(questions) - len(self.questions)
        if not self.questions:
            raise DataError("no questions left for the dataset", path=source or store.path)
        require_ids(store, sorted({q.image_id for q in self.questions}), feature_dim)
        # what items are read from: arrays (vlattn.data.packed), which forked DataLoader workers read without
        # copying the parent's pages, beside the lists kept for callers
        self.question_ids = np.array([q.question_id for q in self.questions], dtype=np.int64)
        self.image_ids = np.array([q.image_id for q in self.questions], dtype=np.int64)
        self.texts = PackedTexts([[q.question] for q in self.questions])
        self.target_offsets = flat_offsets([len(scores) for scores in self.targets])
        self.target_answers = np.array([a for scores in self.targets for a in scores], dtype=np.int64)
        self.target_scores = np.array([v for scores in self.targets for v in scores.values()], dtype=np.float32)

    def _scores(self, question: Question, annotations: dict[int, Annotation], unanswerable: str) -> dict[int, float] | None:
        """The soft target of ``question`` ({answer index: score}), checked against its annotation; None when
        it is unanswerable and skipped."""
        where = f"question {question.question_id}"
        annotation = annotations.get(question.question_id)
        if annotation is None:
            raise DataError("question has no annotation", path=self.source, item=where)
        if annotation.image_id != question.image_id:
            mismatch = f"annotation image {annotation.image_id} != question image {question.image_id}"
            raise DataError(mismatch, path=self.source, item=where)
        assert self.answers is not None
        scores = self.answers.soft_scores(annotation.answers)
        if scores or unanswerable == "keep":
            return scores
        if unanswerable == "error":
            unknown = sorted(set(annotation.answers))
            raise DataError(f"no human answer is in the answer vocabulary: {unknown}", path=self.source, item=where)
        return None

    def __len__(self) -> int:
        return len(self.question_ids)

    def image_ids_at(self, indices: list[int]) -> list[int]:
        return self.image_ids[indices].tolist()

    def regions(self, image_id: int) -> RegionFeatures:
        """The first ``max_regions`` regions of ``image_id`` (zeros with ``zero_image``)."""
        regions = first_regions(self.store, image_id, self.max_regions, self.stored_dtype)
        if not self.zero_image:
            return regions
        return RegionFeatures(np.zeros_like(regions.features), np.zeros_like(regions.boxes), regions.width,
                              regions.height)

    def __getitem__(self, index: int) -> dict[str, Any]:
        image_id = int(self.image_ids[index])
        item: dict[str, Any] = {
            "question_id": int(self.question_ids[index]),
            "image_id": image_id,
            "regions": self.regions(image_id),
            "question": encode_question(self.words, self.texts[index][0], self.max_question_len),
        }
        if self.answers is not None:
            target = np.zeros(len(self.answers), dtype=np.float32)
            start, end = int(self.target_offsets[index]), int(self.target_offsets[index + 1])
            target[self.target_answers[start:end]] = self.target_scores[start:end]
            item["target"] = target
        return item


def encode_question(words: Vocabulary | WordPieceVocabulary, text: str, max_len: int) -> list[int]:
    """Word indices of the first ``max_len`` of :func:`question_tokens` (unknown words -> UNK); with a WordPiece
    vocabulary, ``[CLS] pieces [SEP]`` in ``max_len`` ids (both pad with 0)."""
    if isinstance(words, WordPieceVocabulary):
        return words.encode_text(text, max_len)
    return words.encode(question_tokens(text), max_len)


def collate_vqa(batch: Sequence[dict[str, Any]], shared: Shared = None) -> dict[str, Any]:
    """Batch: :func:`~vlattn.data.captioning.collate_regions` (``shared`` as there) plus ``question_ids`` (B,),
    ``questions`` (B, L) long padded with PAD, ``question_mask`` (B, L) bool (True = word) and ``targets`` (B, A)
    when the items have them."""
    out = collate_regions(batch, shared)
    out["question_ids"] = torch.tensor([item["question_id"] for item in batch], dtype=torch.long)
    length = max(len(item["question"]) for item in batch)
    questions = torch.full((len(batch), length), Vocabulary.PAD, dtype=torch.long)
    for row, item in enumerate(batch):
        questions[row, : len(item["question"])] = torch.tensor(item["question"], dtype=torch.long)
    out["questions"] = questions
    out["question_mask"] = questions != Vocabulary.PAD
    if "target" in batch[0]:
        out["targets"] = torch.from_numpy(np.stack([item["target"] for item in batch]))
    return out
