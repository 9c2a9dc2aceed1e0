"""The answer vocabulary of classification-style VQA models and their soft targets.

Answers are normalised with the official VQA evaluation rules of :mod:`vlattn.metrics.vqa`, so a
candidate answer and the scored answer are the same string.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from vlattn.data.jsonfiles import field, read_json, write_json
from vlattn.errors import DataError
from vlattn.metrics.vqa import normalize_answer as _normalize_answer

# VQA answers repeat heavily ("yes", "2", ...): normalising each distinct string once makes targets for the
# 4.4M human answers of VQA v2 train cheap
normalize_answer = lru_cache(maxsize=1 << 16)(_normalize_answer)

def accuracy_of_count(matches: int, humans: int) -> float:
    """Official accuracy of an answer that ``matches`` of ``humans`` human answers agree with (leave-one-out
    mean of min(1, matches among the others / 3))."""
    kept = (humans - matches) * min(1.0, matches / 3)
    left_out = matches * min(1.0, (matches - 1) / 3)
    return (kept + left_out) / humans


class AnswerVocabulary:
    """Candidate answers (normalised) for classification-style VQA, most frequent first."""

    def __init__(self, answers: Sequence[str]) -> None:
        self.itos = list(answers)
        self.stoi = {answer: index for index, answer in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise DataError("answer vocabulary entries must be unique")

    @classmethod
    def build(
        cls, answers: Iterable[str], *, top_k: int | None = None, min_count: int | None = None
    ) -> "AnswerVocabulary":
        """From ``answers`` (usually each question's ``multiple_choice_answer``), normalised and counted:
        the ``top_k`` most frequent and/or those seen at least ``min_count`` times (ties by answer)."""
        if top_k is None and min_count is None:
            raise DataError("answer vocabulary needs top_k or min_count")
        counts = Counter(normalize_answer(answer) for answer in answers)
        ranked = sorted((a for a, c in counts.items() if a and c >= (min_count or 1)), key=lambda a: (-counts[a], a))
        return cls(ranked[:top_k])

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, answer: object) -> bool:
        return answer in self.stoi

    def index(self, answer: str) -> int | None:
        """Index of the normalised ``answer``, or None when it is not a candidate."""
        return self.stoi.get(normalize_answer(answer))

    def soft_scores(self, answers: Sequence[str]) -> dict[int, float]:
        """Soft targets {index: score} over the candidates among the human ``answers`` (normalised).

        The score of a candidate given by n of the M humans is the official accuracy that answer would
        get, the mean over each human left out of min(1, matches among the others / 3):
        ((M - n) min(1, n/3) + n min(1, (n-1)/3)) / M, which for M = 10 is 0, 0.3, 0.6, 0.9, 1 for
        n = 0, 1, 2, 3, >= 4 (MCAN's and bottom-up-attention-vqa's ``get_score`` table).
        """
        counts = Counter(normalize_answer(answer) for answer in answers)
        return {self.stoi[a]: accuracy_of_count(n, len(answers)) for a, n in counts.items() if a in self.stoi}

    def save(self, path: str | Path) -> None:
        """Write ``{"answers": [...]}`` JSON atomically."""
        write_json(path, {"answers": self.itos})

    @classmethod
    def load(cls, path: str | Path) -> "AnswerVocabulary":
        """Read a vocabulary written by :meth:`save`."""
        answers = field(read_json(path), "answers", list, path=path, item="answers")
        return cls([str(answer) for answer in answers])
