"""VQA answers: the official evaluation's normalisation and accuracy, soft targets, answer vocabulary.

:func:`normalize_answer` follows the official VQA evaluation script (``vqaEval.py``) step by step:

1. newlines/tabs -> spaces, strip;
2. punctuation: each of ``; / [ ] " { } ( ) = + \\ _ - > < @ ` , ? !`` is deleted when the text has it
   next to a space or contains a digit-comma-digit group (``1,000``), otherwise replaced by a space;
   a period not followed by a digit is deleted (``3.5`` keeps its period). The official regex has a
   malformed look-behind that makes it exactly "period not followed by a digit"; it also passes
   ``re.UNICODE`` as the replacement *count* (at most 32 periods), which we do not reproduce;
3. lowercase, split on whitespace, number words ``none zero one .. ten`` -> digits, articles
   ``a an the`` dropped, apostrophe-less contractions restored (``dont`` -> ``don't``), joined by spaces.
   The contraction table is generated: every spelling of the contractions below with some apostrophes
   dropped. It is a superset of the official table's reachable keys; the official table's capitalised
   keys (``Im``, ``Ive``) never match lowercased text, and its odd entry ``somebody'd`` -> ``somebodyd``
   is not reproduced.

:func:`vqa_accuracy` is the official 10-choose-9 average, including its quirk that answers are
normalised only when the human answers are not all identical.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from vlattn.data.jsonfiles import field, read_json, write_json
from vlattn.errors import DataError

_PUNCTUATION = tuple(';/[]"{}()=+\\_-><@`,?!')
_DIGIT_COMMA_DIGIT = re.compile(r"\d,\d")
_PERIOD = re.compile(r"\.(?!\d)")
_NUMBERS = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
            "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}  # fmt: skip
_ARTICLES = frozenset({"a", "an", "the"})
# Contractions whose apostrophe-less spellings the official table restores. Forms whose fully
# stripped spelling is an ordinary word (we'd/wed, he'll/hell, it's/its, ...) are absent, as there.
_CONTRACTIONS = """
ain't aren't can't could've couldn't couldn't've didn't doesn't don't hadn't hadn't've hasn't haven't
he'd he'd've he's how'd how'll how's isn't it'd it'd've it'll ma'am mightn't mightn't've might've
mustn't must've needn't not've o'clock oughtn't 'ow's'at shan't she'd've should've shouldn't
shouldn't've somebody'd've somebody'll somebody's someone'd someone'd've someone'll someone's
something'd something'd've something'll that's there'd there'd've there're there's they'd they'd've
they'll they're they've 'twas wasn't we'd've we've weren't what'll what're what's what've when's
where'd where's where've who'd who'd've who'll who's who've why'll why're why's won't would've
wouldn't wouldn't've y'all y'all'll y'all'd've you'd you'd've you'll you're you've
""".split()


def _apostrophe_variants(word: str) -> Iterable[str]:
    """Spellings of ``word`` with a non-empty subset of its apostrophes removed."""
    parts = word.split("'")
    for keep in itertools.product((True, False), repeat=len(parts) - 1):
        if all(keep):
            continue
        yield parts[0] + "".join(("'" if k else "") + part for k, part in zip(keep, parts[1:]))


_RESTORE = {variant: word for word in _CONTRACTIONS for variant in _apostrophe_variants(word)}


def _clean(text: str) -> str:
    return text.replace("\n", " ").replace("\t", " ").strip()


def _strip_punctuation(text: str) -> str:
    """Step 2 of the official normalisation (see the module docstring)."""
    has_number_comma = _DIGIT_COMMA_DIGIT.search(text) is not None
    out = text
    for mark in _PUNCTUATION:
        delete = has_number_comma or f"{mark} " in text or f" {mark}" in text
        out = out.replace(mark, "" if delete else " ")
    return _PERIOD.sub("", out)


def _digits_and_articles(text: str) -> str:
    """Step 3 of the official normalisation (see the module docstring)."""
    words = [_NUMBERS.get(word, word) for word in text.lower().split()]
    return " ".join(_RESTORE.get(word, word) for word in words if word not in _ARTICLES)


def normalize_answer(answer: str) -> str:
    """An answer normalised as the official VQA evaluation does (``"Two dogs!"`` -> ``"2 dogs"``)."""
    return _digits_and_articles(_strip_punctuation(_clean(answer)))


def vqa_accuracy(prediction: str, answers: Sequence[str]) -> float:
    """Official VQA accuracy of ``prediction`` against the human ``answers`` (normally 10).

    Mean over each human answer left out of min(1, #matching among the others / 3).
    """
    if not answers:
        raise DataError("no human answers to score against")
    prediction = _clean(prediction)
    humans = [_clean(answer) for answer in answers]
    if len(set(humans)) > 1:
        prediction = normalize_answer(prediction)
        humans = [normalize_answer(answer) for answer in humans]
    matches = sum(answer == prediction for answer in humans)
    scores = [min(1.0, (matches - (answer == prediction)) / 3) for answer in humans]
    return sum(scores) / len(scores)


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
        """Soft target {index: min(1, #humans giving that answer / 3)} over the candidates among ``answers``."""
        counts = Counter(normalize_answer(answer) for answer in answers)
        return {self.stoi[a]: min(1.0, count / 3) for a, count in counts.items() if a in self.stoi}

    def save(self, path: str | Path) -> None:
        """Write ``{"answers": [...]}`` JSON atomically."""
        write_json(path, {"answers": self.itos})

    @classmethod
    def load(cls, path: str | Path) -> "AnswerVocabulary":
        """Read a vocabulary written by :meth:`save`."""
        answers = field(read_json(path), "answers", list, path=path, item="answers")
        return cls([str(answer) for answer in answers])
